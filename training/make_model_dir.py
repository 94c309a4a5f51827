"""Make (or refresh) a served model directory from a training segment's files:

    python3 training/make_model_dir.py SEGMENT_DIR MODEL_DIR

SEGMENT_DIR: a training segment's output folder (train.py --out: the two shards +
model.safetensors.index.json, config.json). Writes MODEL_DIR/model.safetensors (the shards merged by train.load_weights, metadata
{"format": "pt"}) and MODEL_DIR/config.json unless MODEL_DIR already has one with the same content
(key order aside), and prints the new file's sha256 (what fixtures/v41-mini-128k-official records).
The tokenizer files and MODEL_CARD.md are left as they are."""
import hashlib
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from safetensors.torch import save_file  # noqa: E402
from train import load_weights  # noqa: E402


def main() -> None:
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.mkdir(parents=True, exist_ok=True)
    sd = load_weights(src)
    save_file(sd, str(dst / "model.safetensors"), metadata={"format": "pt"})
    cfg_new = json.loads((src / "config.json").read_text())
    if not (dst / "config.json").exists() or json.loads((dst / "config.json").read_text()) != cfg_new:
        shutil.copyfile(src / "config.json", dst / "config.json")
        print("config.json copied")
    else:
        print("config.json unchanged (same content)")
    sha = hashlib.sha256((dst / "model.safetensors").read_bytes()).hexdigest()
    print(f"{len(sd)} tensors -> {dst / 'model.safetensors'} sha256 {sha}")


if __name__ == "__main__":
    main()
