"""A controlled cascade experiment: the same model, data and bandit schedule, one arm per clip mode.

    from andrea_diag.config import RunConfig
    from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
    result = run_cascade(CascadeSpec(base=RunConfig(size="tiny"), clips=["none", "global"]))

Every arm starts from the same seed (same initial weights) and replays the same recorded batch
plan, so the token batches are identical across arms; ``cascade.json`` records the per-update
batch hashes' agreement. Only the clip mode differs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from andrea_diag.clip.modes import check_clip
from andrea_diag.config import RunConfig
from andrea_diag.console_text import as_typed, make_console, shown
from andrea_diag.data import BatchPlan, Mixer, PreparedData
from andrea_diag.device import resolve_device
from andrea_diag.errors import UserError
from andrea_diag.experiments.arm_summary import read_summary
from andrea_diag.experiments.cascade_place import check_fresh, check_resumed
from andrea_diag.experiments.resume import arm_state, check_same_run, move_aside
from andrea_diag.experiments.slow_start import SlowStart
from andrea_diag.experiments.spec_checks import checked_arms, checked_spec
from andrea_diag.experiments.status import DONE, RUNNING, marks_interruption
from andrea_diag.factories import build_model, check_gpt_fits, check_model_spec, prepare_run_data
from andrea_diag.record import write_json
from andrea_diag.rundir import child, make_out_dir, read_json
from andrea_diag.runlock import RunLock
from andrea_diag.signals import before_any_output
from andrea_diag.train.components import check_precision
from andrea_diag.train.distributed import (
    check_world,
    env_rank,
    env_world,
    env_world_size,
    init_from_env,
    launch,
)
from andrea_diag.train.graphed import check_graphable
from andrea_diag.train.loop import train_arm


@dataclass
class CascadeSpec:
    """What a cascade varies (``clips``) and what every arm shares (everything else)."""

    base: RunConfig = field(default_factory=RunConfig)
    clips: list[str] = field(default_factory=lambda: ["none", "global"])
    out: Path | None = None
    resume: bool = False  # continue the run in ``out`` (finished arms kept, checkpoints used)

    def __post_init__(self) -> None:  # a str for clips or out, a blank out, a nan or unknown
        checked_spec(self, "CascadeSpec")  # clip mode in an arm's config: spec_checks.py


@dataclass
class CascadeResult:
    """What a cascade returns; its page is the command's to render (``commands/pages.py``)."""

    out_dir: Path
    summaries: dict[str, dict[str, Any]]
    hashes_identical: bool


def default_out(kind: str, size: str) -> Path:
    """``runs/<kind>-<size>-<time>``, with a numeric suffix if that name is taken."""
    base = Path("runs") / f"{kind}-{size}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description:<14}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} updates"),
        TextColumn("loss {task.fields[loss]:>7}  |g| {task.fields[gn]:>8}"),
        TimeElapsedColumn(),
        console=console,
    )


def _fmt(x: float) -> str:
    return f"{x:.3f}" if x == x else "nan"


def load_data(cfg: RunConfig, console: Console) -> PreparedData:
    """Sources + tokenizer + streams; bad source paths fail here, before any output exists."""
    console.print("[dim]preparing data (tokenizer cache: reused when present)…[/]")
    data = prepare_run_data(cfg)  # --source, --data, --vocab-size, --sources
    if data.note:
        console.print(f"[dim]{escape(data.note)}[/]", soft_wrap=True)  # one line, unwrapped
    generated = [n for n, s in data.sources.items() if s.generated]
    if generated:
        console.print(f"[dim]generated (seeded) sources: {shown(', '.join(generated))}[/]")
    return data


def check_runnable(cfg: RunConfig, on_this_host: bool = True) -> None:
    """Device, precision and clipper choices that cannot work here fail before any output
    exists (the config imports no torch, so the precision registry is checked here).
    ``on_this_host=False``: the run trains on another host (a Slurm job), whose device this
    one cannot judge; the checks that do not depend on it still run (the precision; the
    factory imported, not called; the ``--hf-config`` parsed, no weights made)."""
    check_precision(cfg.precision)
    if on_this_host:
        env_world()  # a malformed WORLD_SIZE/RANK is one line before a sweep.json exists
        device = resolve_device(cfg.device)
        check_clip(None, cfg.clip_impl, device)  # the arms' modes: checked by the commands
        if cfg.replicas > 1 and env_world_size() == 1:  # we would spawn them: can this host?
            check_world(cfg.replicas, device.type)
        if cfg.cuda_graph:  # torchrun's world too: its ranks get replicas = 1 in the config
            check_graphable(device, max(cfg.replicas, env_world_size()))
    if not on_this_host:  # its model is built there: here, only what needs no device
        check_model_spec(cfg)
    elif cfg.model_factory or cfg.hf_config:  # a bad factory fails here, before any output
        with torch.random.fork_rng(devices=[]):
            build_model(cfg)
    else:  # the toolkit's GPT: counted, not built (a huge --vocab-size)
        check_gpt_fits(cfg, device.type)


def check_streams(data: PreparedData, seq_len: int) -> None:
    """Every source must hold at least one sequence of seq_len + 1 tokens."""
    short = {n: int(s.numel()) for n, s in data.streams.items() if s.numel() < seq_len + 1}
    if short:
        names = ", ".join(f"{n} ({k} tokens)" for n, k in short.items())
        raise UserError(
            f"too little text for --seq-len {seq_len}: {names}",
            hint="give those sources more text, or lower --seq-len",
        )


def run_arms(
    configs: list[RunConfig],
    out_dir: Path,
    data: PreparedData,
    console: Console | None = None,
    resume: bool = False,
    states: dict[str, tuple[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Train each resolved config as an arm under ``out_dir/<arm>``, on one shared batch plan.

    ``resume``: finished arms are kept, a stopped one continues from its newest checkpoint
    (``resume.py``); ``states``: each arm's state, when the caller already checked them."""
    console = as_typed(console, stderr=True)  # a caller's own: codes as typed
    first = configs[0]
    info = init_from_env(resolve_device(first.device).type)  # D > 1: join the replicas
    # The first arm records the batch plan (an exp3 mixer needs its losses); every later arm
    # replays the saved plan, verified batch by batch against the recorded hashes. The plan
    # draws m x A x D sequences per update; each replica trains on its own m of them.
    plan = BatchPlan(
        data,
        Mixer(first.seed, first.mixer, data.names, sharpness=first.mixer_sharpness),
        seed=first.seed,
        micro_batch=first.micro_batch * first.replicas,
        accum=first.accum,
        seq_len=first.seq_len,
    )
    plan_path = out_dir / "batch_plan.json"
    summaries: dict[str, dict[str, Any]] = {}
    watch = SlowStart.watcher(configs, console)  # 12m+ or bf16 on CPU: say so, then an ETA

    with _progress(console) as progress:
        for i, cfg in enumerate(configs):
            arm_dir = child(out_dir, cfg.arm, "arm")
            if states is not None and cfg.arm in states:
                status, found = states[cfg.arm]
            else:
                status, found = (
                    arm_state(arm_dir, cfg, _warner(console)) if resume else ("new", None)
                )
            if i == 1 and info.is_main and not plan_path.exists():
                _complete_plan(plan, first.steps).save(plan_path)
            if i == 1 and info.world_size > 1:
                torch.distributed.barrier()  # the others replay what rank 0 just saved
            if status == "done":
                summaries[cfg.arm] = found
                console.print(f"[dim]{shown(cfg.arm)}: finished earlier, kept[/]")
                continue
            if status == "restart" and info.is_main:
                _set_aside(out_dir / cfg.arm, console)
            if info.world_size > 1:
                torch.distributed.barrier()  # nobody starts an arm rank 0 is still moving
            arm_plan = plan if i == 0 else BatchPlan.load(plan_path, data, like=plan)
            ckpt = found if status == "checkpoint" else None
            if ckpt is not None:
                console.print(f"{shown(cfg.arm)}: continuing from {shown(ckpt.name)}")
            task = progress.add_task(shown(cfg.arm), total=cfg.steps, loss="-", gn="-")

            def tick(
                update: int, row: dict[str, Any], _task: Any = task, _cfg: RunConfig = cfg
            ) -> None:
                every = max(1, _cfg.steps // 10)
                progress.update(
                    _task, completed=update, loss=_fmt(row["loss"]), gn=_fmt(row["grad_norm"])
                )
                # Output to a file or pipe (CI, a GPU job's log) gets no live bar: log a line
                # every tenth of the run instead, so long work still shows progress.
                if not console.is_terminal and (update % every == 0 or update == _cfg.steps):
                    console.print(
                        f"{shown(_cfg.arm)}: update {update}/{_cfg.steps}  "
                        f"loss {_fmt(row['loss'])}  |g| {_fmt(row['grad_norm'])}",
                        highlight=False,
                    )

            summaries[cfg.arm] = train_arm(
                cfg, out_dir / cfg.arm, data, arm_plan, progress=watch(tick, i), resume_from=ckpt
            )
    if len(configs) == 1 and info.is_main:
        _complete_plan(plan, first.steps).save(plan_path)
    return summaries


def _set_aside(arm_dir: Path, console: Console) -> None:
    """An arm that started but saved no checkpoint: kept under another name, trained anew."""
    aside = move_aside(arm_dir)
    said = f"{shown(arm_dir.name)}: no checkpoint yet; kept as {shown(aside)}, restarting"
    console.print(f"[yellow]{said}[/]")


def _warner(console: Console) -> Callable[[str], None]:
    def warn(message: str) -> None:  # a torn newest checkpoint passed over
        console.print(f"[yellow]{escape(message)}[/]", highlight=False, soft_wrap=True)

    return warn


def _complete_plan(plan: BatchPlan, steps: int) -> BatchPlan:
    """The recording plan with every update drawn. After a resume that found the first arm
    already finished, the plan was never drawn in this process: a seeded schedule draws the
    same batches again (a pure function of seed and update); an exp3 schedule cannot."""
    missing = [u for u in range(1, steps + 1) if u not in plan.records]
    if missing and plan.mixer is not None and plan.mixer.policy != "seeded":
        raise UserError(
            "the exp3 batch plan of this run was lost before it was saved",
            hint="start the run again; an exp3 schedule depends on the first arm's losses",
        )
    for u in missing:
        plan.batch(u)
    return plan


def _arms_worker(configs: list[RunConfig], out_dir: Path, data: PreparedData, resume: bool) -> None:
    """One replica of ``--nproc``: train every arm on the data the launcher prepared (passed
    whole, so every replica sees exactly the launcher's tokens)."""
    main = env_rank() == 0
    run_arms(configs, out_dir, data, make_console(stderr=True, quiet=not main), resume=resume)


def _launch_replicas(
    configs: list[RunConfig], out_dir: Path, data: PreparedData, resume: bool
) -> dict[str, dict[str, Any]]:
    """Start D worker processes for the arms; rank 0 writes, so the summaries are read back."""
    try:
        launch(configs[0].replicas, _arms_worker, configs, out_dir, data, resume)
    except torch.multiprocessing.ProcessRaisedException as exc:
        last = str(exc).strip().splitlines()[-1]
        raise UserError(
            f"a replica process failed: {last}",
            hint=f"{out_dir} keeps what rank 0 recorded before the failure",
        ) from None
    # cleaned and held to its table as a kept arm's is: the command formats its figures
    return {c.arm: read_summary(child(out_dir, c.arm, "arm")) for c in configs}


def hashes_identical(out_dir: Path, arms: list[str]) -> bool:
    """True when every arm's per-update batch hashes are the same list."""
    lists = []
    for arm in arms:
        path = child(out_dir, arm, "arm") / "schedule.json"
        hashes = read_json(path, "the arm's schedule", kind=dict).get("batch_hashes")
        if not isinstance(hashes, list):
            raise UserError(f"{path} holds no list of batch hashes", hint="the file is damaged")
        lists.append(hashes)
    return all(h == lists[0] for h in lists[1:])


def run_cascade(
    spec: CascadeSpec,
    console: Console | None = None,
    data: PreparedData | None = None,
) -> CascadeResult:
    """Run every arm, check the batches were identical, write cascade.json (the commands
    render the report from it).

    ``data``: already prepared sources (a sweep prepares them once for all its cells)."""
    checked_spec(spec, "CascadeSpec")  # again: a field set after it was made (no arm, "none")
    configs = checked_arms(spec.base, spec.clips)  # each arm's config, resolved
    console = as_typed(console, stderr=True)  # a caller's own: codes as typed
    check_runnable(configs[0])
    out_dir = spec.out or default_out("cascade", configs[0].size)
    if spec.resume:
        check_resumed(out_dir, main=env_rank() == 0)  # before the data: one line, no wait
    elif env_rank() == 0:
        check_fresh(out_dir)
    with contextlib.nullcontext() if spec.resume else before_any_output():
        data = data or load_data(configs[0], console)
    check_streams(data, configs[0].seq_len)
    world = env_world_size()  # > 1 under torchrun: every rank runs this function
    if world > 1:
        if configs[0].replicas not in (1, world):
            raise UserError(f"--nproc {configs[0].replicas} under a launcher of {world} processes")
        configs = [dataclasses.replace(c, replicas=world) for c in configs]
    main = env_rank() == 0
    if not main:  # under torchrun every rank runs this: rank 0 alone speaks, as it alone writes
        console = make_console(stderr=True, quiet=True)
    if not spec.resume and main:
        check_fresh(out_dir)  # again: the data may have taken a while (made since?)
        make_out_dir(out_dir)
    # One process per cascade: taken before anything is read to continue or moved aside, and
    # released however this ends (an error, Ctrl-C, SIGTERM).
    with RunLock(out_dir) if main else contextlib.nullcontext():
        return _run_locked(spec, configs, out_dir, data, console)


def _run_locked(
    spec: CascadeSpec,
    configs: list[RunConfig],
    out_dir: Path,
    data: PreparedData,
    console: Console,
) -> CascadeResult:
    """run_cascade's work once the cascade's lock is held (by rank 0)."""
    world, main = env_world_size(), env_rank() == 0
    states = None
    if spec.resume:
        check_same_run(out_dir, spec.clips, configs)
        # every arm checked (its checkpoint read, its rows counted) before anything is written
        warn = _warner(console)
        states = {c.arm: arm_state(child(out_dir, c.arm, "arm"), c, warn) for c in configs}
    meta = {
        "arms": spec.clips,
        "size": configs[0].size,
        "seed": configs[0].seed,
        "lr": configs[0].lr,
        "max_norm": configs[0].max_norm,
        "recipe": configs[0].recipe,
        "steps": configs[0].steps,
        "replicas": configs[0].replicas,
        "command": " ".join(shlex.quote(a) for a in ["andrea-diag", *sys.argv[1:]]),
        "status": RUNNING,
    }
    if spec.resume:  # keep how the run was started; say how it was continued
        old = read_json(out_dir / "cascade.json", "the cascade's record", kind=dict)
        before = old.get("resumed_with")
        before = [str(c) for c in before] if isinstance(before, list) else []
        started = old.get("command")  # the settings are the arms' (checked), not the record's
        meta = {**old, **meta, "status": RUNNING, "resumed_with": [*before, meta["command"]],
                "command": started if isinstance(started, str) else meta["command"]}  # fmt: skip
    if main:
        write_json(out_dir / "cascade.json", meta)
    with marks_interruption(out_dir, meta, console, main=main):  # Ctrl-C: say how to resume
        if configs[0].replicas > 1 and world == 1:
            summaries = _launch_replicas(configs, out_dir, data, spec.resume)  # launch and wait
        else:
            summaries = run_arms(configs, out_dir, data, console, resume=spec.resume, states=states)
    if not main:
        return CascadeResult(out_dir, {}, True)
    identical = hashes_identical(out_dir, spec.clips)
    meta.update(status=DONE, batch_hashes_identical=identical)
    write_json(out_dir / "cascade.json", meta)
    return CascadeResult(out_dir, summaries, identical)
