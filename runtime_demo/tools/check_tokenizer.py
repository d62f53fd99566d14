import subprocess, sys, random, sysconfig
from pathlib import Path
from tokenizers import Tokenizer
tj = "python/spec_edge/default_pair/target/tokenizer.json"
tok = Tokenizer.from_file(tj)
stdlib = Path(sysconfig.get_paths()["stdlib"])
files = sorted(stdlib.rglob("*.py"))
random.seed(0)
texts = [f.read_text(errors="replace") for f in random.sample(files, 60)]
texts += ["héllo wörld 東京 ٣٤٥ ½ Ⅻ \u00a0 \u2028x", "don't 's 're  \n\n  x<|endoftext|>y  <|endoftext|>", "a  b\t\tc \n", "   ", "", "x\r\n\r\ny", "😀 emoji 🎉!!", "'''\"\"\"'s'S"]
bad = 0
for i, t in enumerate(texts):
    want = tok.encode(t).ids
    r = subprocess.run(["/tmp/runner-build/runtime_demo/spec-edge-tokenize", tj], input=t.encode(), capture_output=True)
    got = [int(x) for x in r.stdout.split()]
    if got != want:
        bad += 1
        k = next((j for j,(a,b) in enumerate(zip(got,want)) if a!=b), min(len(got),len(want)))
        print("MISMATCH", i, len(got), len(want), "at", k, repr(tok.decode(want[max(0,k-3):k+3])), got[k:k+5], want[k:k+5])
    d = subprocess.run(["/tmp/runner-build/runtime_demo/spec-edge-tokenize", tj, "--decode"], input=" ".join(map(str, want)).encode(), capture_output=True).stdout.decode(errors="replace")
    if d != tok.decode(want):
        print("DECODE MISMATCH", i, repr(d[:60]), repr(tok.decode(want)[:60]))
print("texts", len(texts), "chars", sum(map(len, texts)), "mismatches", bad)
