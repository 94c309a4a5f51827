import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HuggingFaceTokenizer, loadHuggingFaceTokenizer } from './hf-tokenizer.js';
import { CheckpointError, InputError } from '../errors.js';
import { TINY_CHAT_TEMPLATE, tinyBpeTokenizerJson, tinyMetaspaceTokenizerJson, tinyWordLevelTokenizerJson } from './test-fixtures.js';

test('hf tokenizer: tiny BPE from tokenizer.json encodes, decodes and streams', () => {
  const tok = new HuggingFaceTokenizer({ tokenizerJson: tinyBpeTokenizerJson() });
  assert.equal(tok.kind, 'huggingface');
  assert.equal(tok.vocabSize, 264);
  assert.equal(tok.bosId, null);
  assert.deepEqual(tok.eosIds, []);
  assert.equal(tok.chatTemplate, null);
  assert.deepEqual(tok.encode('hello'), [258, 0x6f]);
  assert.deepEqual(tok.encode('hello world'), [258, 0x6f, 259, 0x6f, 0x72, 0x6c, 0x64]);
  assert.deepEqual(tok.encode('</s>'), [261]);
  assert.deepEqual(tok.encode(''), []);
  for (const s of ['hello world', '中文 😀 mixed', '  spaces\nand\ttabs ', '']) {
    const ids = tok.encode(s);
    assert.equal(tok.decode(ids), s);
    const stream = tok.createDecodeStream();
    const pieces = ids.map((id) => stream.push(id));
    pieces.push(stream.flush());
    assert.equal(pieces.join(''), s);
    assert.ok(
      pieces.every((p) => !p.includes('\uFFFD')),
      s,
    );
  }
  // '中' is three byte tokens: nothing is emitted until the third arrives.
  const stream = tok.createDecodeStream();
  assert.equal(stream.push(258), 'hell');
  assert.equal(stream.push(0xe4), '');
  assert.equal(stream.push(0xb8), '');
  assert.equal(stream.push(0xad), '中');
  assert.equal(stream.push(0xe4), '');
  assert.equal(stream.flush(), '\uFFFD');
  assert.throws(() => tok.decode([264]), InputError);
  // No chat template and no BOS: the plain-text template.
  assert.equal(tok.decode(tok.applyChatTemplate([{ role: 'user', content: 'hello' }])), 'User: hello\nAssistant:');
});

test('hf tokenizer: loaded from a model dir with tokenizer_config.json and generation_config.json', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'csa2-hf-tok-'));
  try {
    await writeFile(join(dir, 'tokenizer.json'), JSON.stringify(tinyBpeTokenizerJson()));
    await writeFile(
      join(dir, 'tokenizer_config.json'),
      JSON.stringify({ bos_token: '<s>', eos_token: { __type: 'AddedToken', content: '</s>' }, chat_template: TINY_CHAT_TEMPLATE }),
    );
    await writeFile(join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: [261, 263] }));
    const tok = await loadHuggingFaceTokenizer(dir);
    assert.equal(tok.bosId, 260);
    assert.deepEqual(tok.eosIds, [261, 263]);
    const messages = [
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'hello' },
      { role: 'assistant', content: 'hell' },
      { role: 'user', content: 'w' },
    ] as const;
    assert.equal(tok.renderChatTemplate(messages), '<s>sys\n<|user|>hello<|assistant|>hell</s><|user|>w<|assistant|>');
    const ids = tok.applyChatTemplate(messages);
    assert.deepEqual(ids, [260, 0x73, 0x79, 0x73, 0x0a, 262, 258, 0x6f, 263, 258, 261, 262, 0x77, 263]);

    // chat_template.jinja overrides the config's template; without a template the plain one gets the BOS.
    await writeFile(join(dir, 'chat_template.jinja'), '{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}');
    assert.equal((await loadHuggingFaceTokenizer(dir)).renderChatTemplate(messages), '[system]sys[user]hello[assistant]hell[user]w');
    await rm(join(dir, 'chat_template.jinja'));
    await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify({ bos_token: '<s>' }));
    const plain = await loadHuggingFaceTokenizer(dir);
    assert.deepEqual(plain.applyChatTemplate([{ role: 'user', content: 'w' }]), [260, ...plain.encode('User: w\nAssistant:')]);

    // A template that raises is an InputError.
    await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify({ chat_template: "{{ raise_exception('roles must alternate') }}" }));
    const raising = await loadHuggingFaceTokenizer(dir);
    assert.throws(
      () => raising.applyChatTemplate(messages),
      (e: unknown) => e instanceof InputError && /roles must alternate/.test(e.message),
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('hf tokenizer: broken files are CheckpointErrors', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'csa2-hf-tok-'));
  try {
    await writeFile(join(dir, 'tokenizer.json'), '{ not json');
    await assert.rejects(loadHuggingFaceTokenizer(dir), (e: unknown) => e instanceof CheckpointError && /tokenizer\.json: invalid JSON/.test(e.message));
    await writeFile(join(dir, 'tokenizer.json'), JSON.stringify({ version: '1.0' }));
    await assert.rejects(loadHuggingFaceTokenizer(dir), (e: unknown) => e instanceof CheckpointError && /"model"/.test(e.message));
    await writeFile(join(dir, 'tokenizer.json'), JSON.stringify(tinyBpeTokenizerJson()));
    await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify({ eos_token: '<|eot|>' }));
    await assert.rejects(
      loadHuggingFaceTokenizer(dir),
      (e: unknown) => e instanceof CheckpointError && /eos_token "<\|eot\|>" is not in the vocabulary/.test(e.message),
    );
    await writeFile(join(dir, 'tokenizer_config.json'), '{}');
    await writeFile(join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: 999 }));
    await assert.rejects(loadHuggingFaceTokenizer(dir), (e: unknown) => e instanceof CheckpointError && /eos_token_id 999/.test(e.message));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('hf tokenizer: Unigram + Metaspace (leading space of the first token stripped) streams like decode', () => {
  const tok = new HuggingFaceTokenizer({ tokenizerJson: tinyMetaspaceTokenizerJson() });
  assert.equal(tok.vocabSize, 10);
  assert.deepEqual(tok.encode('hello world !'), [1, 2, 3]);
  assert.equal(tok.decode([1, 2, 3]), 'hello world !');
  assert.equal(tok.decode([2]), 'world');
  const stream = tok.createDecodeStream();
  assert.deepEqual(
    [1, 2, 3, 1].map((id) => stream.push(id)),
    ['hello', ' world', ' !', ' hello'],
  );
  assert.equal(stream.flush(), '');
});

test('hf tokenizer: WordLevel maps unknown words to the unk token, or rejects them when there is none', () => {
  const withUnk = new HuggingFaceTokenizer({ tokenizerJson: tinyWordLevelTokenizerJson(true) });
  assert.deepEqual(withUnk.encode('hello  world foo'), [1, 2, 0]);
  const noUnk = new HuggingFaceTokenizer({ tokenizerJson: tinyWordLevelTokenizerJson(false) });
  assert.deepEqual(noUnk.encode('world hello'), [2, 1]);
  assert.throws(
    () => noUnk.encode('hello foo'),
    (e: unknown) => e instanceof InputError && /"foo"/.test(e.message),
  );
});
