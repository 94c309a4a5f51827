import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fmtDuration, fmtPercent, fmtSig, fmtTokens, markdownTable } from './table.js';

describe('markdownTable', () => {
  it('pads every column to its widest cell and marks alignment', () => {
    const t = markdownTable(
      [{ header: 'N', align: 'left' }, { header: 'tok/s' }],
      [
        ['1024', '41.2'],
        ['16K', '3.05'],
      ],
    );
    assert.equal(t, ['| N    | tok/s |', '| :--- | ----: |', '| 1024 |  41.2 |', '| 16K  |  3.05 |'].join('\n'));
  });

  it('refuses a row with the wrong number of cells', () => {
    assert.throws(() => markdownTable([{ header: 'a' }, { header: 'b' }], [['1']]), /row 0 has 1 cells, expected 2/);
  });
});

describe('number formats', () => {
  it('keeps three significant digits', () => {
    assert.equal(fmtSig(41.234), '41.2');
    assert.equal(fmtSig(0.012345), '0.0123');
    assert.equal(fmtSig(1234.5), '1235');
    assert.equal(fmtPercent(0.01234), '1.23%');
  });

  it('names contexts and durations the way people say them', () => {
    assert.equal(fmtTokens(16384), '16K');
    assert.equal(fmtTokens(240), '240');
    assert.equal(fmtDuration(850), '850 ms');
    assert.equal(fmtDuration(12_345), '12.3 s');
    assert.equal(fmtDuration(245_000), '4 min 05 s');
  });
});
