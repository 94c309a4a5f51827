"""Session 15: the figures of a call's log.jsonl (eval records) and, for call 3, the serving rule's clauses
(training/README.md, "Session 15"), from the files a call brought back:
    python3 training/s15_summary.py LOG.jsonl [KL_FP32.jsonl KL_TF32.jsonl]
The KL files hold one record per model, the candidate first and step 1334 (models/v41-mini-128k) second."""
import json
import sys

log = [json.loads(x) for x in open(sys.argv[1])]
for r in log:
    if r["type"] in ("resume", "oom", "done"):
        print(r)
    if r["type"] == "eval":
        print(f"eval step {r['step']} tokens {r['tokens']} held-out {r['lm_loss']:.4f}")
        for cell, t in r["tasks"].items():
            fails = [f"{w.strip()}->{p.strip()}" for w, p in zip(t["want"], t["pred"]) if w != p]
            doc = f" doc {100 * t['exact_doc128']:.2f}%" if "exact_doc128" in t else ""
            print(f"  {cell:20s} n={t['n']:2d} exact {100 * t['exact']:6.2f}%{doc} tok {t['token_acc']:.3f}  fails {' '.join(fails)}")
        if r.get("replay_kl"):
            k = r["replay_kl"]
            print(f"  in-training replay_kl (TF32, {k.get('passages')} passages): doc_mean {k.get('doc_mean'):.4e} dec mean {k.get('mean'):.4e}")
tr = [r for r in log if r["type"] == "train"]
if tr:
    print("train records:", len(tr), "first", {k: tr[0].get(k) for k in ("step", "seq_len", "loss", "lr")}, "last", {k: tr[-1].get(k) for k in ("step", "seq_len", "loss", "lr")})
if len(sys.argv) < 4:
    sys.exit()
kf = [json.loads(x) for x in open(sys.argv[2])]
kt = [json.loads(x) for x in open(sys.argv[3])]
K = {}
for name, recs in (("fp32", kf), ("tf32", kt)):
    for i, rec in enumerate(recs):
        K[(i, name)] = rec["replay_kl"]["doc_mean"]
        print(f"KL {name} model {rec['model']} step {rec['step']}: doc_mean {rec['replay_kl']['doc_mean']:.6e} first16 {rec['replay_kl']['doc_mean_first16']:.4e} bench {rec['replay_kl']['doc_bench_passage_mean']:.4e} dec {rec['replay_kl']['mean']:.4e} max row {rec['replay_kl']['doc_max']:.4f}")
F_c = (K[(0, "fp32")] + K[(0, "tf32")]) / 2
F_s = (K[(1, "fp32")] + K[(1, "tf32")]) / 2
S = max(abs(K[(1, "tf32")] - K[(1, "fp32")]), abs(K[(0, "tf32")] - K[(0, "fp32")]))
pc, ps = kf[0]["replay_kl"]["doc_per_passage_mean"], kf[1]["replay_kl"]["doc_per_passage_mean"]
print(f"per passage (fp32): candidate lower in {sum(a < b for a, b in zip(pc, ps))} of {len(pc)}")
ev = [r for r in log if r["type"] == "eval"][-1]
T = ev["tasks"]
ex = lambda c: 100 * T[c]["exact"]
a = ev["lm_loss"] <= 4.36
b = ex("passkey@4096") >= 93.75 and ex("niah_single@4096") >= 87.5 and ex("passkey@8192") >= 87.5 and ex("niah_single@8192") >= 68.75
s16, s32 = ex("passkey@16384") + ex("niah_single@16384"), ex("passkey@32768") + ex("niah_single@32768")
c = s16 >= 162.5 and s32 > 100
d = F_c <= F_s + S
print(f"(a) held-out {ev['lm_loss']:.4f} <= 4.36: {a}")
print(f"(b) 4K {ex('passkey@4096'):.2f}/{ex('niah_single@4096'):.2f} 8K {ex('passkey@8192'):.2f}/{ex('niah_single@8192'):.2f}: {b}")
print(f"(c) 16K sum {s16:.2f} >= 162.5, 32K sum {s32:.2f} > 100: {c}")
print(f"(d) F(cand) {F_c:.6e} <= F(1334) {F_s:.6e} + S {S:.6e} = {F_s + S:.6e}: {d}")
print("RULE MET" if a and b and c and d else "RULE NOT MET")
