"""Benchmark stage 3: training throughput and epoch time with 1 and 2 Horovod workers.

```
.venv/bin/python benchmarks/bench_train.py [--data-dir results/data/digits] [--epochs 20]
```

Without ``--data-dir`` the digits data set is built first with the real download and
preprocess stages (offline: scikit-learn's bundled copy) in a temporary directory. Each worker
count is trained with ``scripts/train.py`` started by ``clusterbench.launch`` (as in the workflow),
then the final model is evaluated on the test split. Prints figures only; asserts nothing.
The comparison with hand-written references is benchmarks/bench.py (`make bench`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_data import build_digits

REPO = Path(__file__).resolve().parent.parent


def train(data: Path, out: Path, run: dict) -> float:
    """Train one run; returns the wall time of the whole command (start-up included)."""
    cmd = [sys.executable, str(REPO / "scripts" / "train.py")]
    cmd += ["--data-dir", str(data), "--run", json.dumps(run), "--out-dir", str(out)]
    cmd = [sys.executable, "-m", "clusterbench.launch", "--np", str(run["workers"]), "--", *cmd]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(
            f"training failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    return time.monotonic() - start


def test_accuracy(data: Path, run_dir: Path, eval_dir: Path) -> float:
    from clusterbench import evaluate

    params = json.dumps({"batch_size": 512, "split": "test"})
    evaluate.main(
        [
            "--data-dir",
            str(data),
            "--model",
            str(run_dir / "model.pt"),
            "--params",
            params,
            "--out-dir",
            str(eval_dir),
        ]
    )
    return json.loads((eval_dir / "metrics.json").read_text())["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="a preprocessed data dir (default: digits)")
    parser.add_argument("--dataset", default="digits", help="meta.json dataset of --data-dir")
    parser.add_argument("--model", default="small_cnn", choices=["small_cnn", "resnet"])
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch")
    parser.add_argument("--lr", type=float, default=0.05, help="per-worker base LR")
    parser.add_argument("--warmup-epochs", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backend", default="horovod", choices=["horovod", "ddp"])
    parser.add_argument("--bn", default="aggregate", choices=["aggregate", "sync", "local"])
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        root = Path(tmp)
        data = args.data_dir or build_digits(root)
        print(
            f"{args.dataset}/{args.model}: {args.epochs} epochs, global batch {args.batch_size}, "
            f"lr {args.lr} x workers, warm-up {args.warmup_epochs} epoch(s)"
        )
        header = (
            f"{'workers':>7} {'images/s':>9} {'epoch s':>8} {'train s':>8} {'wall s':>7} "
            f"{'val acc':>8} {'test acc':>9}"
        )
        print(header)
        for workers in (int(w) for w in args.workers.split(",")):
            run = {
                "name": f"bench-{workers}w",
                "dataset": args.dataset,
                "model": args.model,
                "workers": workers,
                "nodes": 1,
                "gpus_per_node": 0,
                "epochs": args.epochs,
                "minutes": None,
                "batch_size": args.batch_size,
                "lr": args.lr,
                "momentum": 0.9,
                "weight_decay": 5e-4,
                "warmup_epochs": args.warmup_epochs,
                "seed": args.seed,
                "backend": args.backend,
                "bn": args.bn,
                "batch_scaling": "global",
                "deterministic": False,
                "precision": "fp32",
                "channels_last": False,
            }
            out = root / "runs" / run["name"]
            wall = train(data, out, run)
            lines = (out / "metrics.jsonl").read_text().splitlines()
            metrics = [json.loads(line) for line in lines]
            steady = metrics[1:] or metrics  # the first epoch includes one-off warm-up costs
            info = json.loads((out / "run.json").read_text())
            acc = test_accuracy(data, out, root / "eval" / run["name"])
            print(
                f"{workers:>7} {statistics.median(m['images_per_second'] for m in steady):>9.0f} "
                f"{statistics.median(m['epoch_seconds'] for m in steady):>8.2f} "
                f"{info['train_seconds']:>8.1f} {wall:>7.1f} "
                f"{metrics[-1]['val_accuracy']:>8.4f} {acc:>9.4f}",
                flush=True,
            )
    print("images/s, epoch s: medians over epochs 2..N (training phase only); train s: all")
    print("epochs incl. validation and checkpoints; wall s: the whole command incl. start-up.")


if __name__ == "__main__":
    main()
