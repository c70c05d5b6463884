"""A training job that survives restarts by itself, as PyTorch's DDP tutorial does: every
start loads the newest checkpoint in --save-dir, and rank 0 writes one every --every seconds.

Rank 0 also appends a line to DIR/starts at each start: when the process began, when torch was
imported, when the process group was up, the step it resumed at and the world size, in
seconds since the epoch; the soak splits what each restart cost from it.

Each step costs every rank --work seconds of CPU and one gloo all-reduce, so the ranks move
in lockstep: one rank that stops stops them all. Rank 0 prints `step N` every --print-every
steps and keeps DIR/progress (the step reached, rewritten each step), which the goodput soak
reads; --until-file ends it (exit 0). The same script runs under herd, under torchrun's elastic agent and under a shell loop:
it needs nothing from its launcher but torch.distributed's env:// variables.
"""
import time

STARTED = time.time()  # before torch's import: what a restart costs is seen from here

import argparse  # noqa: E402
import glob  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

IMPORTED = time.time()


def newest(save_dir: str) -> int:
    """The step of the newest complete checkpoint (0 when there is none)."""
    steps = []
    for path in glob.glob(os.path.join(save_dir, "step_*")):
        tail = os.path.basename(path)[len("step_"):]
        if tail.isdigit():
            steps.append(int(tail))
    return max(steps, default=0)


def write(path: str, text: str) -> None:
    """`text` into `path` whole: a reader (or a restart) never sees half of it."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def spin(seconds: float) -> None:
    end = time.process_time() + seconds
    x = 1.0
    while time.process_time() < end:
        for _ in range(2000):
            x = x * 1.0000001 + 1e-9


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--save-dir", required=True)
    p.add_argument("--every", type=float, default=30.0, help="seconds between checkpoints")
    p.add_argument("--work", type=float, default=0.01, help="CPU seconds per step per rank")
    p.add_argument("--sleep", type=float, default=0.1, help="seconds each step waits (I/O, a GPU)")
    p.add_argument("--print-every", type=int, default=20)
    p.add_argument("--until-file", default=None, help="once this file exists, every rank ends after the step it is in (exit 0)")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    os.makedirs(args.save_dir, exist_ok=True)
    # Every rank starts from the step rank 0 found: they must agree.
    start = torch.tensor([newest(args.save_dir) if rank == 0 else 0])
    dist.broadcast(start, 0)
    step = int(start.item())
    if rank == 0:
        sys.stdout.write(f"rank 0 of {world}: resuming at step {step}\n")
        sys.stdout.flush()
        with open(os.path.join(args.save_dir, "starts"), "a") as f:
            f.write(f"{STARTED:.3f} {IMPORTED:.3f} {time.time():.3f} {step} {world}\n")
    saved = time.monotonic()
    while True:
        spin(args.work)
        time.sleep(args.sleep)
        # One all-reduce a step: the ranks' count, and whether rank 0 was told to end.
        told = rank == 0 and args.until_file is not None and os.path.exists(args.until_file)
        t = torch.tensor([1.0, 1.0 if told else 0.0])
        dist.all_reduce(t)
        if int(t[0].item()) != world:
            sys.stdout.write(f"rank {rank}: all-reduce gave {t[0].item()}, not {world}\n")
            return 1
        step += 1
        if rank == 0:
            write(os.path.join(args.save_dir, "progress"), f"{step}\n")
            if time.monotonic() - saved >= args.every:
                write(os.path.join(args.save_dir, f"step_{step}"), f"{step}\n")
                saved = time.monotonic()
            if step % args.print_every == 0:
                sys.stdout.write(f"step {step}\n")
                sys.stdout.flush()
        if t[1].item() > 0:
            if rank == 0:
                write(os.path.join(args.save_dir, f"step_{step}"), f"{step}\n")
                sys.stdout.write(f"done at step {step}\n")
            dist.destroy_process_group()
            return 0


if __name__ == "__main__":
    sys.exit(main())
