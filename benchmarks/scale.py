"""A corpus of WMT14's size: preparation once, then runs that memory-map it, against Multi30k side by side.

Builds a `files` corpus of `--pairs` training pairs from Multi30k's sentences (line i joins training sentences
i mod 29,000 and 7i+1 mod 29,000, both sides alike: deterministic, 24 words a side on average; validation and test
are Multi30k's val and test2016), then measures, with ABLATE_CACHE_DIR and the results in `--work`:

1. prepare   `ablate data prepare`: its wall seconds and peak resident memory, once; then the same command
             again, with everything prepared (what every later `ablate run` pays);
2. side by side  after one step of the baseline (it measures what a machine measures once: its peak FLOP/s
             and the model's FLOP counts), `ablate run` of two runs of experiments/base.yaml's model and batch
             size, one on Multi30k and one on the large corpus, one core each, `--steps` steps: the seconds from
             the command to each run's first step, the peak resident memory of the sweep process and of each
             worker, and each run's training tok/s (their ratio is the figure: one machine, one moment);
3. two on the large corpus  the large corpus's run with two seeds at once: their summed peak memory;
4. loading       in this process, for each corpus: the seconds to plan an epoch (its batches' index arrays), and
             the milliseconds to collate each of its first 200 batches from the memory map and from the same pairs
             held as lists (what the in-memory path did), beside the run's milliseconds a step: what reading the
             map costs a step, apart from the two corpora's different sentence lengths, which the tok/s ratio
             of step 2 also measures.

    ABLATE_DATA_DIR=... python benchmarks/scale.py [--pairs 4500000] [--steps 100] [--work DIR]

Wall seconds are the machine's; CPU seconds (the command's and what it waited for, user and system) say what the
work cost whatever else ran. Peak memory is each process's VmHWM (/proc/PID/status), polled every 0.1 s over the
command's process tree: the sweep, the fork server and every worker. Run it on a quiet machine; it prints a markdown
table for benchmarks/README.md and writes scale.json in `--work`. The corpus (about 1.3 GB at 4.5M pairs) and the
prepared arrays stay in `--work` for the next run unless it is deleted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ablate.data.corpus import CORPUS, data_dir  # noqa: E402

MULTI30K = 29_000


def build_corpus(folder: Path, pairs: int) -> None:
    """The synthetic corpus, written once for a given size (a marker file says which)."""
    marker = folder / "pairs.txt"
    if marker.is_file() and marker.read_text().strip() == str(pairs):
        return
    folder.mkdir(parents=True, exist_ok=True)
    multi30k = CORPUS.build(CORPUS.parse("multi30k"), root=data_dir())
    train = multi30k.read("train", "en", "de")
    started = time.perf_counter()
    with open(folder / "train.en", "w", encoding="utf-8") as en, open(folder / "train.de", "w", encoding="utf-8") as de:
        for first in range(0, pairs, 100_000):
            rows = range(first, min(pairs, first + 100_000))
            en.write("".join(f"{train[i % MULTI30K][0]} {train[(7 * i + 1) % MULTI30K][0]}\n" for i in rows))
            de.write("".join(f"{train[i % MULTI30K][1]} {train[(7 * i + 1) % MULTI30K][1]}\n" for i in rows))
    for split, name in (("val", "val"), ("test_2016_flickr", "test")):
        for side, lang in enumerate(("en", "de")):
            text = "".join(f"{pair[side]}\n" for pair in multi30k.read(split, "en", "de"))
            (folder / f"{name}.{lang}").write_text(text, encoding="utf-8")
    marker.write_text(f"{pairs}\n")
    print(f"corpus: {pairs:,} pairs written in {time.perf_counter() - started:.0f} s to {folder}", flush=True)


def experiment(work: Path, steps: int) -> Path:
    """Two runs of the base model: Multi30k (the baseline) and the large corpus."""
    paths = {split: {"en": f"{split}.en", "de": f"{split}.de"} for split in ("train", "val", "test")}
    large = {"data.corpus": {"name": "files", "paths": paths}, "data.data_dir": str(work / "corpus"),
             "data.valid": "val", "data.test": ["test"]}  # fmt: skip
    spec = {"name": "scale", "description": "the base model on Multi30k and on a corpus of WMT14's size",
            "extends": str(ROOT / "experiments/base.yaml"),
            "training": {"max_steps": steps, "validate_every": steps, "checkpoint_every": None,
                         "valid_bleu_pairs": 0},
            "evaluation": {"beam_size": 1, "average_checkpoints": 1},
            "variants": {"large": large}}  # fmt: skip
    path = work / "scale.yaml"
    path.write_text(json.dumps(spec, indent=2))  # JSON is YAML
    return path


class Peaks:
    """The peak resident memory (VmHWM) of every process under `root`, polled until stopped."""

    def __init__(self, root: int):
        self.root, self.peaks, self.labels = root, {}, {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stopped.is_set():
            for pid in self._tree():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                except OSError:
                    continue
                hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")), 0)
                self.peaks[pid] = max(self.peaks.get(pid, 0), hwm)
                self.labels.setdefault(pid, label(cmdline, pid == self.root))
            time.sleep(0.1)

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        tree, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += children.get(pid, [])
        return tree

    def stop(self) -> dict[str, float]:
        """Peak MiB by process label."""
        self.stopped.set()
        self.thread.join()
        out: dict[str, float] = {}
        for pid, kib in self.peaks.items():
            name = self.labels[pid]
            if name:
                out[name] = max(out.get(name, 0.0), kib / 1024)
        return out


def label(cmdline: str, root: bool) -> str:
    if root:
        return "sweep" if " run " in f"{cmdline} " else "prepare"
    if "ablate.worker" in cmdline:
        return "worker " + "/".join(cmdline.split()[-1].split("/")[-2:])
    return "fork server" if "forkserver" in cmdline else ""


def timed(command: list[str], env: dict[str, str], first_steps: dict[str, Path] | None = None) -> dict:
    """Runs an `ablate` command; its wall seconds, peak memory by process and, for each run directory given, the
    seconds from the start to its first training step."""
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    process = subprocess.Popen([sys.executable, "-m", "ablate.cli", *command], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    peaks = Peaks(process.pid)
    firsts: dict[str, float] = {}
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    while process.poll() is None:
        for name, directory in (first_steps or {}).items():
            metrics = directory / "metrics.jsonl"
            if name not in firsts and metrics.is_file() and '"loss"' in metrics.read_text():
                firsts[name] = time.perf_counter() - started
        time.sleep(0.05)
    reader.join()
    if process.returncode != 0:
        sys.exit(f"ablate {' '.join(command)} failed:\n{''.join(output)}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the command and every process it waited for
    return {
        "wall_s": time.perf_counter() - started,
        "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
        "peak_mib": peaks.stop(),
        "first_step_s": firsts,
        "output": "".join(output),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4_500_000, help="training pairs of the large corpus")
    parser.add_argument("--steps", type=int, default=100, help="training steps of each run")
    parser.add_argument("--work", type=Path, default=Path("/tmp/ablate-scale"), help="corpus, cache and results")
    parser.add_argument("--loading-only", action="store_true",
                        help="only step 4, added to the scale.json that an earlier run left in --work")  # fmt: skip
    args = parser.parse_args()
    work = args.work.resolve()
    if args.loading_only:
        figures = json.loads((work / "scale.json").read_text())
        figures["loading"] = loading(work / "scale.yaml", work)
        (work / "scale.json").write_text(json.dumps(figures, indent=2) + "\n")
        print(table(figures))
        return
    build_corpus(work / "corpus", args.pairs)
    spec = experiment(work, args.steps)
    env = os.environ | {"ABLATE_CACHE_DIR": str(work / "cache"), "COLUMNS": "200"}
    figures: dict = {"pairs": args.pairs, "steps": args.steps, "cpu": cpu_name()}
    figures["prepare"] = timed(["data", "prepare", str(spec)], env)
    figures["prepared"] = timed(["data", "prepare", str(spec)], env)
    figures["disk_mib"] = sum(f.stat().st_size for f in (work / "cache/corpora").rglob("*") if f.is_file()) / 2**20
    for name in ("warm", "side_by_side", "two_large"):
        subprocess.run(["rm", "-rf", str(work / name)], check=True)
    # one step of the baseline first: what a machine measures once (its peak FLOP/s, the model's FLOP counts) is
    # measured before the timed runs, as it is for anyone who has run ablate here before
    timed(["run", str(spec), "--only", "baseline", "--results", str(work / "warm"), "--set", "training.max_steps=1"],
          env)  # fmt: skip
    runs = work / "side_by_side/scale/runs"
    figures["side_by_side"] = timed(
        ["run", str(spec), "--results", str(work / "side_by_side"), "--threads-per-run", "1"],
        env,
        {"multi30k": runs / "baseline/seed-1", "large": runs / "large/seed-1"},
    )
    figures["tok_s"] = {run: result_tok_s(work / "side_by_side", run) for run in ("baseline", "large")}
    runs = work / "two_large/scale/runs/large"
    figures["two_large"] = timed(["run", str(spec), "--only", "large", "--seeds", "2", "--results",
                                  str(work / "two_large"), "--threads-per-run", "1"], env,
                                 {"seed 1": runs / "seed-1", "seed 2": runs / "seed-2"})  # fmt: skip
    figures["loading"] = loading(spec, work)
    for phase in ("prepare", "prepared", "side_by_side", "two_large"):
        figures[phase].pop("output")
    (work / "scale.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(table(figures))


def loading(spec: Path, work: Path, batches: int = 200) -> dict:
    """Each run's epoch plan and collation, timed here: from the map and from lists of the same pairs."""
    os.environ["ABLATE_CACHE_DIR"] = str(work / "cache")
    from ablate.data.batches import collate
    from ablate.data.dataset import load_dataset
    from ablate.sweep.experiment import load_experiment
    from ablate.train.trainer import updates_of

    out = {}
    for run in load_experiment(spec).runs:
        training = run.spec.training
        width = training.bucket_width("fp32")  # the runs' precision on a CPU without native bf16
        train = load_dataset(run.spec.data, run.spec.tokenizer).train
        started = time.perf_counter()
        plan = [b for update in updates_of(train, training, 0, width) for b in update]
        plan_s = time.perf_counter() - started
        chosen = plan[:batches]
        started = time.perf_counter()
        for idx in chosen:
            collate([train[i] for i in idx.tolist()], width)
        mapped_ms = (time.perf_counter() - started) / len(chosen) * 1000
        lists = [[train[i] for i in idx.tolist()] for idx in chosen]
        started = time.perf_counter()
        for examples in lists:
            collate(examples, width)
        lists_ms = (time.perf_counter() - started) / len(chosen) * 1000
        record = json.loads((work / "side_by_side/scale/runs" / run.name / "seed-1/result.json").read_text())
        out[run.name] = {"pairs": len(train), "plan_s": plan_s, "batches": len(plan), "collate_mapped_ms": mapped_ms,
                         "collate_lists_ms": lists_ms, "step_ms": record["step_ms"]}  # fmt: skip
    return out


def result_tok_s(results: Path, run: str) -> float:
    """Source and target tokens a second of training, as the run measured them."""
    record = json.loads((results / "scale/runs" / run / "seed-1/result.json").read_text())
    return float(record["train_src_tokens_per_s"] + record["train_tgt_tokens_per_s"])


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def table(f: dict) -> str:
    side, two = f["side_by_side"], f["two_large"]
    workers = {k: v for k, v in side["peak_mib"].items() if k.startswith("worker")}
    large_worker = max(v for k, v in workers.items() if "large" in k)
    multi_worker = max(v for k, v in workers.items() if "baseline" in k)
    two_workers = sum(v for k, v in two["peak_mib"].items() if k.startswith("worker"))
    ratio = f["tok_s"]["large"] / f["tok_s"]["baseline"]
    rows = [
        ("preparation, once", f"{f['prepare']['wall_s']:.0f} s ({f['prepare']['cpu_s']:.0f} s of CPU), peak "
                              f"{f['prepare']['peak_mib']['prepare']:,.0f} MiB"),
        ("`ablate data prepare` again (prepared)", f"{f['prepared']['wall_s']:.1f} s"),
        ("size on disk", f"{f['disk_mib']:,.0f} MiB"),
        ("`ablate run` to step 1 (large, prepared)", f"{side['first_step_s'].get('large', float('nan')):.1f} s "
                                                     f"(Multi30k: {side['first_step_s'].get('multi30k', 0):.1f} s)"),
        ("peak RSS, sweep process", f"{side['peak_mib'].get('sweep', 0):,.0f} MiB"),
        ("peak RSS, worker (large / Multi30k)", f"{large_worker:,.0f} / {multi_worker:,.0f} MiB"),
        ("two large runs side by side, workers' summed peak", f"{two_workers:,.0f} MiB (sweep "
                                                               f"{two['peak_mib'].get('sweep', 0):,.0f} MiB)"),
        ("train tok/s, large / Multi30k", f"{f['tok_s']['large']:,.0f} / {f['tok_s']['baseline']:,.0f} = "
                                          f"{ratio:.3f}×"),
    ]  # fmt: skip
    for run, name in (("large", "large"), ("baseline", "Multi30k")):
        load = f["loading"][run]
        rows.append((f"{name}: an epoch's plan; collating a batch from the map / from lists; a step",
                     f"{load['plan_s']:.1f} s ({load['batches']:,} batches); {load['collate_mapped_ms']:.2f} / "
                     f"{load['collate_lists_ms']:.2f} ms; {load['step_ms']:,.0f} ms"))  # fmt: skip
    head = f"{f['pairs']:,} pairs, {f['steps']} steps a run, {f['cpu']}\n\n| measure | figure |\n|---|---|\n"
    return head + "\n".join(f"| {a} | {b} |" for a, b in rows)


if __name__ == "__main__":
    main()
