"""The training loop: contrastive loss with in-batch + hard negatives, regularisers, validation,
best-checkpoint selection and exact resume.

Loss per batch = ``model.compute_loss`` (contrastive NLL on ``model.score`` unless the model
overrides it: CAME's weighted per-expert losses) + FLOPS (on ``Encoded.sparse``, query and passage
weights from the recipe, ramped up quadratically over ``flops_warmup_ratio`` of the steps as in
SPLADE, times ``model.flops_multiplier()``) + ``model.regularization(q, p)``, the one channel of
a router's regulariser (TASER's routing entropy; by default each pass's ``Encoded.aux_loss``,
SB-MoE's balance losses), logged as ``regularization``; ``model.loss_parts()`` joins
the training log and ``model.on_train_step(step, total)`` runs before every optimizer step
(0-based: a schedule that survives resuming, like CAME's stages). These hooks are the model
contract of :class:`~pyserini_moe.modeling.base.RetrievalModel`, with plain defaults.

Outputs in ``output_dir``: ``recipe.yaml``, ``dev_topics.tsv`` + ``dev_qrels.txt`` (the held-out
queries), ``train_log.jsonl`` (one JSON line per optimizer step:
step, epoch, loss and its parts, lr, elapsed, val_loss when validated), ``best/`` (the lowest
validation loss; the final model when nothing is held out), ``last/``, ``snapshots/step-N/`` (the
model at every validation, with ``training.keep_snapshots``), ``checkpoint/`` (written at
every validation: model, optimizer, scheduler, step, RNG states; ``resume=True`` continues from
it exactly) and ``train_summary.json`` (recipe + final metrics).
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import math
import os
import pickle
import random
import shutil
import time
from collections import deque
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from tqdm import tqdm

try:
    import fcntl
except ImportError:  # not POSIX: no flock, see _hold_lock
    fcntl = None  # type: ignore[assignment]

from pyserini_moe.data.export import write_topics_tsv, write_trec_qrels
from pyserini_moe.errors import UserError, library_write
from pyserini_moe.io import (
    SAFE_LOAD_REFUSAL,
    atomic_path,
    process_alive,
    read_json,
    refused_by_safe_load,
)
from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side
from pyserini_moe.modeling.folder import CARD_FILE
from pyserini_moe.modeling.lengths import position_limit
from pyserini_moe.modeling.losses import flops
from pyserini_moe.modeling.registry import model_class
from pyserini_moe.outputs import refuse_foreign_folder
from pyserini_moe.train.collator import Batch, Collator
from pyserini_moe.train.config import DataConfig, ModelConfig, TrainConfig, TrainingConfig
from pyserini_moe.train.data import NEGATIVES_RUN, Example, TrainingData, load_training_data
from pyserini_moe.train.distributed import (
    Ranks,
    barrier,
    gather_passages,
    gather_queries,
    init_from_env,
    sum_gradients,
)
from pyserini_moe.train.grad_cache import cached_pass, encode_chunked
from pyserini_moe.train.loop import OptimizerLoop, TrainingDiverged, set_seed
from pyserini_moe.train.measured import measured_rows

log = logging.getLogger(__name__)

LOG_FILE = "train_log.jsonl"
SUMMARY_FILE = "train_summary.json"
DEV_TOPICS_FILE = "dev_topics.tsv"  # held-out validation queries, for tuning on a dev split
DEV_QRELS_FILE = "dev_qrels.txt"
RECIPE_FILE = "recipe.yaml"
CHECKPOINT_DIR = "checkpoint"
SNAPSHOTS_DIR = "snapshots"  # snapshots/step-N/: the model at every validation (keep_snapshots)
INIT_DIR = "init"  # cli.train --init-only's untrained model, which training keeps beside its own
STATE_FILE = "state.pt"
PROGRESS_FILE = "progress.json"
# Without a progress bar (--quiet, a regression's log), a line at most this often says how far the
# training is: a protocol step can take minutes on a CPU, and validation may come once at the end.
QUIET_PROGRESS_SECONDS = 120.0
# Recipe fields that may change when resuming: they extend or relocate the run, not redefine it.
RESUMABLE_CHANGES = {"epochs", "max_steps", "device", "eval_every", "keep_snapshots"}


def build_model(config: ModelConfig, device: str | torch.device) -> RetrievalModel:
    """``<Class>.from_backbone(backbone, **args)`` of the registered model type."""
    return model_class(config.type).from_backbone(config.backbone, device=device, **config.args)


def parameter_groups(model: RetrievalModel, config: TrainingConfig) -> list[dict[str, Any]]:
    """AdamW groups: learning rate by the longest matching ``group_learning_rates`` key (else
    ``learning_rate``); no weight decay on biases and LayerNorm weights (1-d parameters).

    A key matches a parameter name it prefixes (``head.``) or, when it holds a wildcard, that it
    matches as a glob (``*.route.*``: the routers wherever they sit in the backbone).
    """
    prefixes = sorted(config.group_learning_rates, key=len, reverse=True)
    groups: dict[tuple[str, bool], dict[str, Any]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        prefix = next((p for p in prefixes if name.startswith(p) or fnmatchcase(name, p)), "")
        decay = param.ndim >= 2
        group = groups.setdefault((prefix, decay), {
            "params": [], "name": f"{prefix or '<default>'}{'' if decay else ' (no decay)'}",
            "lr": config.group_learning_rates.get(prefix, config.learning_rate),
            "weight_decay": config.weight_decay if decay else 0.0})
        group["params"].append(param)
    unused = set(prefixes) - {prefix for prefix, _ in groups}
    if unused:
        tops = sorted({n.split(".")[0] + "." for n, _ in model.named_parameters()})
        raise UserError(f"training.group_learning_rates: prefix(es) {sorted(unused)} match no "
                        f"parameter of the {model.model_type} model (its parameter names start "
                        f"with {', '.join(tops)})")
    return [groups[key] for key in sorted(groups)]


def _check_lengths(model: RetrievalModel, data: DataConfig) -> None:
    """Before any work: the recipe's lengths fit the backbone's positions. A longer passage
    length failed at the first long batch, after the mining; a longer query length was saved
    with the model, and every search of its indexes was then refused."""
    limit = position_limit(model)
    for key in ("query_max_length", "passage_max_length"):
        value = getattr(data, key)
        if limit is not None and value > limit:
            raise UserError(f"data.{key} {value} is above the {limit} token positions of the "
                            f"{model.model_type} model's backbone: set it to {limit} or less")


class Trainer:
    """Fine-tunes ``model`` (already on its device) with ``config``; ``data`` defaults to what
    ``config.data`` describes, loaded when training starts."""

    def __init__(self, model: RetrievalModel, config: TrainConfig,
                 data: TrainingData | None = None, progress: bool = True) -> None:
        self.model = model
        self.config = config
        self.cfg = config.training
        self.data = data
        self.progress = progress
        self.out = Path(config.output_dir)
        _check_lengths(model, config.data)
        self.collator = Collator(model, config.data.query_max_length,
                                 config.data.passage_max_length)
        # Saved with every checkpoint; indexes record it and search cuts queries as training did.
        model.query_max_length = config.data.query_max_length
        self._validation: list[list[Example]] | None = None
        # The files this trainer wrote into the output folder before training (its mined
        # negatives, when its data was read first: _epoch_steps, evaluate): no earlier run's.
        self._own: set[str] = {INIT_DIR}
        self._aside: Path | None = None  # an earlier run --overwrite replaces, until replaced
        self._aside_lock: int | None = None  # the descriptor holding _aside's lock
        # Set under torchrun (see pyserini_moe.train.distributed): this rank's slice of a batch.
        self.ranks: Ranks | None = init_from_env()
        self.is_main = self.ranks is None or self.ranks.is_main
        if self.ranks is not None and self.cfg.grad_cache_chunk:
            raise UserError("training.grad_cache_chunk is not supported under torchrun: give "
                            "each rank a smaller batch instead")

    # -- loss ------------------------------------------------------------------------------
    def loss(self, batch: Batch, flops_scale: float = 1.0,
             counts: list[int] | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Total loss of one batch, and its unweighted parts for the log.

        ``counts``: under torchrun, how many of the global batch's queries each rank holds;
        ``batch`` is this rank's slice, and the loss is the global batch's.
        """
        return self.loss_of(self._encode(batch.queries, Side.QUERY),
                            self._encode(batch.passages, Side.PASSAGE), batch, flops_scale,
                            counts)

    def _encode(self, inputs: dict[str, torch.Tensor], side: Side) -> Encoded:
        """One side of a batch: in chunks of ``grad_cache_chunk`` texts when set (validation's
        memory then stays that of one chunk too)."""
        if self.cfg.grad_cache_chunk:
            return encode_chunked(self.model, inputs, side, self.cfg.grad_cache_chunk)
        return self.model(**inputs, side=side)

    def loss_of(self, q: Encoded, p: Encoded, batch: Batch, flops_scale: float = 1.0,
                counts: list[int] | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of a batch's encoded queries and passages: it reads nothing but ``q`` and
        ``p`` (what lets GradCache compute it on cached representations)."""
        local_share = 1.0  # terms computed on this rank's slice only are averaged over ranks
        if counts is not None and self.ranks is not None:
            q, p = gather_queries(q, self.ranks, counts), gather_passages(p, self.ranks, counts)
            batch = Batch(batch.queries, batch.passages,
                          torch.arange(sum(counts), device=batch.positive_index.device))
            local_share = 1.0 / self.ranks.world
        total = self.model.compute_loss(q, p, batch.positive_index, self.cfg.temperature)
        parts = {"rank_loss": total.item(), **self.model.loss_parts()}
        weights = self.cfg.flops_weight
        flops_scale = flops_scale * self.model.flops_multiplier()
        for name, enc, weight in (("flops_query", q, weights.query),
                                  ("flops_passage", p, weights.passage)):
            if enc.sparse is not None and weight > 0:
                value = flops(enc.sparse)
                total = total + weight * flops_scale * value
                parts[name] = value.item()
        value = self.model.regularization(q, p)
        if value is not None:
            total = total + local_share * value
            parts["regularization"] = value.item()
        return total, parts

    @torch.no_grad()
    def evaluate(self) -> float | None:
        """Mean loss over the held-out queries' fixed batches (full FLOPS weights, eval mode), so
        values from different steps compare; None when nothing is held out."""
        data = self._data()
        if self._validation is None:
            self._validation = data.validation_batches(self.cfg.batch_size)
        if not self._validation:
            return None
        was_training = self.model.training
        self.model.eval()
        total, count = 0.0, 0
        for examples in self._validation:
            loss, _ = self.loss(self.collator(examples))
            total += loss.item() * len(examples)
            count += len(examples)
        self.model.train(was_training)
        return total / count

    def _data(self) -> TrainingData:
        if self.data is None:
            self.data = load_training_data(self.config.data, self.out, progress=self.progress,
                                           sampling_seed=self.cfg.seed)
            self._own |= {NEGATIVES_RUN, "mining"}  # mining/: a model's index, when it mined
        return self.data

    # -- the loop --------------------------------------------------------------------------
    def train(self, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
        """Train to the end of the recipe (or ``max_steps``); returns the summary it writes.

        ``resume`` continues from ``output_dir/checkpoint``; without it, an output folder that
        already holds an earlier training is refused unless ``overwrite`` (then training starts
        afresh), and one holding anything else always (:meth:`_check_output_dir`).
        """
        with self._only_training_here():
            if self.is_main:
                self._say_earlier_runs_aside()
            self._check_folders(resume, overwrite)
            with self._replacing_earlier(overwrite and not resume and self.is_main):
                return self._train(self._prepare(resume), resume)

    @contextlib.contextmanager
    def _only_training_here(self) -> Iterator[None]:
        """One training at a time into an output folder, refused from its start: two into one
        new folder both passed every check and the second replaced the first's model. The lock
        (``.<output>.lock`` beside the folder) is the system's, so a killed training holds it no
        longer; the file goes when the training ends."""
        if not self.is_main or fcntl is None:
            yield
            return
        self.out.parent.mkdir(parents=True, exist_ok=True)
        lock = self.out.parent / f".{self.out.name}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(f"another training is writing into {self.out} now: wait for it to "
                            "end, or give another --output-dir") from None
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)
            os.close(fd)

    def _train(self, data: TrainingData, resume: bool) -> dict[str, Any]:
        epoch_steps = self._epoch_steps()
        total = min(sum(epoch_steps), self.cfg.max_steps or sum(epoch_steps))
        if self.cfg.max_steps and total < self.cfg.max_steps and self.is_main:
            # max_steps stops a training early; it never repeats the data past its epochs
            log.warning("warning: max_steps %d is more than the %d epoch(s) hold: training stops after "
                        "%d steps (raise --epochs to train longer)", self.cfg.max_steps,
                        self.cfg.epochs, total)
        loop = OptimizerLoop(self.model, parameter_groups(self.model, self.cfg),
                             self.cfg.learning_rate, total, self.cfg.warmup_ratio,
                             self.cfg.max_grad_norm)
        state = {"step": 0, "best_val_loss": None, "best_step": None, "val_loss": None,
                 "elapsed": 0.0}
        if resume:  # checked (damage, recipe changes) before anything in the folder is written
            state = self._load_checkpoint(loop.optimizer, loop.scheduler)
            if state["step"] > total:  # the records would say fewer steps than the model has
                raise UserError(f"cannot resume {self.out}: its checkpoint is at step "
                                f"{state['step']}, past the {total} steps of the new length "
                                "(--max-steps / --epochs); give a longer one")
            log.info("resuming at step %d of %d", state["step"], total)
        if self.is_main:
            self._write_dev_split(data)
            self._write_recipe()
        if not resume:
            if self.is_main:
                (self.out / LOG_FILE).unlink(missing_ok=True)
            set_seed(self.cfg.seed)
        log.info("%d training pairs (%d queries held out), %d steps on %s", len(data.train_pairs),
                 len({q for q, _ in data.validation_pairs}), total, self.model.device)
        recent = self._run(data, loop, state, epoch_steps, total, resume)
        self.model.eval()
        if self.is_main:
            self.model.save(self.out / "last")
            if state["best_step"] is None:  # nothing held out: the final model is the one to use
                self.model.save(self.out / "best")
        summary = self._write_summary(state, total, recent)
        barrier(self.ranks)  # every rank returns once the main rank's files exist
        return summary

    def _check_folders(self, resume: bool, overwrite: bool) -> None:
        """Check the output folder against ``resume`` / ``overwrite``, before anything is
        written."""
        checkpoint = self.out / CHECKPOINT_DIR
        if resume and not (checkpoint / STATE_FILE).is_file():
            raise FileNotFoundError(f"nothing to resume: {checkpoint} holds no checkpoint")
        folders = [CHECKPOINT_DIR, "best", "last", *[SNAPSHOTS_DIR] * self.cfg.keep_snapshots]
        for blocked in (self.out / name for name in folders):
            if blocked.exists() and not blocked.is_dir():  # found now, not after the first epoch
                raise UserError(f"{blocked} is a file where the training writes a folder: move it "
                                "away or choose another output directory")
        if not resume and self.is_main:
            self._check_output_dir(overwrite)

    @contextlib.contextmanager
    def _replacing_earlier(self, replace: bool) -> Iterator[None]:
        """``--overwrite``: the earlier run is moved aside (``.<output>.old-<pid>``), not deleted,
        until the new run saves its first checkpoint, from which ``--resume`` continues it; an
        error or Ctrl-C before that puts the earlier run back as it was (an interrupted
        replacement once left the old best/ beside the new recipe and logs, the old checkpoint
        deleted)."""
        self._aside = self._set_aside() if replace else None
        try:
            yield
        except BaseException:
            self._put_back()
            raise
        finally:
            self._drop_earlier()

    def _aside_prefix(self) -> str:
        return f".{self.out.name}.old-"

    def _say_earlier_runs_aside(self) -> None:
        """An ``--overwrite`` killed before its first checkpoint (SIGKILL runs no clean-up) left
        the earlier run in the hidden ``.<output>.old-<pid>``: said on every later start, never
        deleted here (it may be the only copy of a finished training). A folder is still in use
        only while the training that set it aside holds its lock (:func:`_hold_lock`), which
        the system drops when that process ends however it ends: the process id in the name
        alone misled once it belonged to another live process (a container reuses ids)."""
        prefix = self._aside_prefix()
        if not self.out.parent.is_dir():
            return
        for aside in sorted(self.out.parent.glob(f"{glob.escape(prefix)}*")):
            pid = aside.name[len(prefix):].partition("-")[0]
            if (pid.isdigit() and aside.is_dir() and not aside.is_symlink()
                    and not _locked(aside, int(pid))):
                log.warning("warning: %s holds an earlier run of %s, set aside by an --overwrite that was "
                            "killed: move its contents back into %s to keep it, or delete it",
                            aside, self.out, self.out)

    def _set_aside(self) -> Path | None:
        earlier = [e for e in self.out.iterdir() if e.name not in self._own] \
            if self.out.is_dir() else []
        if not earlier:
            return None
        aside = self.out.parent / f"{self._aside_prefix()}{os.getpid()}"
        for n in range(2, 1000):  # a killed run of the same process id (a container's) left one
            if not aside.exists():
                break
            aside = aside.with_name(f"{self._aside_prefix()}{os.getpid()}-{n}")
        aside.mkdir()
        self._aside_lock = _hold_lock(aside)
        for entry in earlier:
            entry.rename(aside / entry.name)
        return aside

    def _put_back(self) -> None:
        """The new run's files out, the earlier run's back (what stayed, ``_own``, stays)."""
        if self._aside is None:
            return
        for entry in self.out.iterdir():
            if entry.name in self._own and not (self._aside / entry.name).exists():
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for entry in self._aside.iterdir():
            entry.rename(self.out / entry.name)
        self._aside.rmdir()
        self._aside = None
        self._release_aside_lock()

    def _drop_earlier(self) -> None:
        """The new run is resumable (or finished): the earlier one is gone for good."""
        if self._aside is not None:
            shutil.rmtree(self._aside, ignore_errors=True)
            self._aside = None
        self._release_aside_lock()

    def _release_aside_lock(self) -> None:
        if self._aside_lock is not None:
            os.close(self._aside_lock)
            self._aside_lock = None

    def _prepare(self, resume: bool) -> TrainingData:
        """Load (mine) the data into the output folder."""
        created = not self.out.exists()
        self.out.mkdir(parents=True, exist_ok=True)
        if self.data is None:
            if not self.is_main:  # the main rank mines first (and fills the shared caches)
                barrier(self.ranks)
            try:
                self.data = load_training_data(self.config.data, self.out, reuse_mined=resume,
                                               progress=self.progress and self.is_main,
                                               sampling_seed=self.cfg.seed)
            except BaseException:  # bad data (an unknown collection): leave no folder behind
                if created and self.is_main:
                    shutil.rmtree(self.out, ignore_errors=True)
                raise
            if self.is_main:
                barrier(self.ranks)
        if not self.data.train_pairs:
            raise UserError("no training examples: every judged query was held out")
        return self.data

    def _check_output_dir(self, overwrite: bool) -> None:
        """Before anything is read or deleted: a new training replaces what an earlier one wrote
        (best/, recipe.yaml, the logs, even with its checkpoint/ deleted to save space), so a
        folder holding any of it needs ``overwrite``; and a folder that is not a training run of
        this toolkit holding nothing else (io's kinds table: an index, a user's files beside or
        inside its models) is refused, never trained into. --init-only's init/, which training
        keeps, and what this trainer wrote itself (``_own``) are no earlier training."""
        earlier = sorted(e.name for e in self.out.iterdir() if e.name not in self._own) \
            if self.out.is_dir() else []
        if not earlier:
            return
        if not overwrite and (self.out / CHECKPOINT_DIR).exists():
            raise FileExistsError(f"{self.out} already holds a training checkpoint; pass --resume "
                                  "to continue it, --overwrite to start again, or choose another "
                                  "output directory")
        refuse_foreign_folder(self.out, RECIPE_FILE)
        if not overwrite:
            raise FileExistsError(f"{self.out} already holds a training run (e.g. "
                                  f"{', '.join(earlier[:3])}); pass --overwrite to start again, "
                                  "or choose another output directory")

    def _run(self, data: TrainingData, loop: OptimizerLoop, state: dict[str, Any],
             epoch_steps: list[int], total: int, resume: bool) -> deque[float]:
        """The steps from ``state["step"]`` to ``total``: log, validate, checkpoint; returns the
        recent losses (the summary's running mean)."""
        accumulation = self.cfg.grad_accumulation
        eval_every = self.cfg.eval_every or epoch_steps[0]
        flops_warmup = math.ceil(self.cfg.flops_warmup_ratio * total)
        self.model.train()
        recent: deque[float] = deque(self._logged_losses() if resume else (), maxlen=20)
        started = time.perf_counter() - state["elapsed"]
        bar = tqdm(total=total, initial=state["step"], desc="train", unit="step",
                   disable=not self.progress or not self.is_main)
        step = state["step"]
        said = time.perf_counter()
        for epoch, steps_in_epoch in enumerate(epoch_steps):
            first = sum(epoch_steps[:epoch])
            if step >= total:
                break
            if step >= first + steps_in_epoch:
                continue
            batches = data.epoch_batches(epoch, self.cfg.batch_size)
            while step < min(total, first + steps_in_epoch):
                k = step - first
                group = batches[k * accumulation:(k + 1) * accumulation]
                scale = min(1.0, (step + 1) / flops_warmup) ** 2 if flops_warmup else 1.0
                loss, parts = self._train_step(group, loop, step, total, scale)
                step += 1
                recent.append(loss)
                entry = {"step": step, "epoch": round(epoch + (k + 1) / steps_in_epoch, 4),
                         "loss": loss, **parts, "lr": loop.lr(step - 1),
                         "elapsed": round(time.perf_counter() - started, 3)}
                bar.update()
                bar.set_postfix(loss=f"{sum(recent) / len(recent):.4f}")
                if bar.disable and time.perf_counter() - said >= QUIET_PROGRESS_SECONDS:
                    said = time.perf_counter()
                    self._say_progress(step, total, entry["elapsed"], recent)
                state.update(step=step, elapsed=entry["elapsed"])
                if not self.is_main:  # the main rank validates, logs and saves
                    continue
                if step % eval_every == 0 or step == total:
                    entry["val_loss"] = self._validate(state)
                    self._append_log(entry)
                    self._save_checkpoint(state, loop.optimizer, loop.scheduler)
                    self._drop_earlier()
                else:
                    self._append_log(entry)
        bar.close()
        return recent

    def _say_progress(self, step: int, total: int, elapsed: float, recent: deque[float]) -> None:
        """The progress bar's news as one log line, for runs without the bar."""
        if not self.is_main:
            return
        rate = elapsed / max(step, 1)  # seconds a step over the whole run (a resume included)
        log.info("step %d of %d, loss %.4f, %s so far, about %s left", step, total,
                 sum(recent) / len(recent), _minutes(elapsed), _minutes(rate * (total - step)))

    def _epoch_steps(self) -> list[int]:
        """Optimizer steps of every epoch (batch packing can add a batch, so count them), up to
        the epoch ``max_steps`` ends in: the epochs after it never run."""
        steps: list[int] = []
        for epoch in range(self.cfg.epochs):
            if self.cfg.max_steps and sum(steps) >= self.cfg.max_steps:
                break
            steps.append(math.ceil(self._data().num_batches(epoch, self.cfg.batch_size)
                                   / self.cfg.grad_accumulation))
        return steps

    def _train_step(self, group: list[list[Example]], loop: OptimizerLoop, step: int, total: int,
                    flops_scale: float) -> tuple[float, dict[str, float]]:
        """One optimizer step over ``group`` (``grad_accumulation`` batches); mean loss + parts."""
        self.model.on_train_step(step, total)

        def one_pass(examples: list[Example]) -> tuple[torch.Tensor, dict[str, float]]:
            if self.cfg.grad_cache_chunk:  # back-propagates itself, 1 / len(group) of the loss
                batch = self.collator(examples)
                return cached_pass(self.model, batch.queries, batch.passages,
                                   self.cfg.grad_cache_chunk,
                                   lambda q, p: self.loss_of(q, p, batch, flops_scale),
                                   scale=1.0 / len(group))
            if self.ranks is None:
                return self.loss(self.collator(examples), flops_scale)
            return self.loss(self.collator(self.ranks.local(examples)), flops_scale,
                             self.ranks.counts(len(examples)))

        return loop.step([lambda e=e: one_pass(e) for e in group],
                         before_update=None if self.ranks is None
                         else lambda: sum_gradients(self.model))

    def _validate(self, state: dict[str, Any]) -> float | None:
        """Validation loss now; saves ``best/`` when it is the lowest so far (and this step's
        snapshot with ``keep_snapshots``: what a study of checkpoint selection evaluates later)."""
        val_loss = self.evaluate()
        if val_loss is not None and not math.isfinite(val_loss):
            raise TrainingDiverged(state["step"], f"the validation loss is {val_loss}")
        if self.cfg.keep_snapshots:
            self.model.save(self.out / SNAPSHOTS_DIR / f"step-{state['step']}")
        state["val_loss"] = val_loss
        if val_loss is not None and (state["best_val_loss"] is None
                                     or val_loss < state["best_val_loss"]):
            state.update(best_val_loss=val_loss, best_step=state["step"])
            self.model.save(self.out / "best")
        if val_loss is not None:
            log.info("step %d: validation loss %.4f (best %.4f at step %d)", state["step"],
                     val_loss, state["best_val_loss"], state["best_step"])
        return val_loss

    # -- files -----------------------------------------------------------------------------
    def _logged_losses(self) -> list[float]:
        """The losses the log holds (a resumed run's summary averages its last steps, not only
        those after the resume)."""
        path = self.out / LOG_FILE
        if not path.is_file():
            return []
        return [json.loads(line)["loss"] for line in path.read_text().splitlines() if line.strip()]

    def _append_log(self, entry: dict[str, Any]) -> None:
        with open(self.out / LOG_FILE, "a") as f:  # JSON has no NaN: one would be a bug here
            f.write(json.dumps(entry, allow_nan=False) + "\n")

    def _write_dev_split(self, data: TrainingData) -> None:
        """The held-out queries as topics + qrels: the dev split on which hybrid weights are tuned
        (TASER appendix D carves it from the training queries), never trained on."""
        qids = list(dict.fromkeys(q for q, _ in data.validation_pairs))
        if not qids:
            return
        write_topics_tsv({q: data.queries[q] for q in qids}, self.out / DEV_TOPICS_FILE)
        write_trec_qrels({q: {d: 1 for d in data.positives[q]} for q in qids},
                         self.out / DEV_QRELS_FILE)

    def _write_recipe(self) -> None:
        with atomic_path(self.out / RECIPE_FILE) as tmp:
            tmp.write_text(yaml.safe_dump(self.config.to_dict(), sort_keys=False))

    def _save_checkpoint(self, state: dict[str, Any], optimizer: torch.optim.Optimizer,
                         scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
        """Everything an exact continuation needs, replaced atomically."""
        rng = {"python": random.getstate(), "torch": torch.get_rng_state(),
               "numpy": _numpy_state_to_tensors(np.random.get_state())}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        with atomic_path(self.out / CHECKPOINT_DIR, directory=True) as tmp:
            with library_write(tmp / STATE_FILE):
                torch.save({"model": self.model.state_dict(),
                            "optimizer": optimizer.state_dict(),
                            "scheduler": scheduler.state_dict(), "rng": rng}, tmp / STATE_FILE)
            (tmp / PROGRESS_FILE).write_text(json.dumps(
                {**state, "recipe": self.config.to_dict()}, indent=2))

    def _load_checkpoint(self, optimizer: torch.optim.Optimizer,
                         scheduler: torch.optim.lr_scheduler.LRScheduler) -> dict[str, Any]:
        checkpoint = self.out / CHECKPOINT_DIR
        try:
            progress = read_json(checkpoint / PROGRESS_FILE, "training checkpoint")
        except UserError:
            raise UserError(f"{checkpoint / PROGRESS_FILE}: the training checkpoint is damaged "
                            "(not valid JSON); start again with --overwrite") from None
        self._check_same_recipe(progress.pop("recipe"))
        try:
            saved = torch.load(checkpoint / STATE_FILE, map_location=self.model.device,
                               weights_only=True)
        except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as e:
            if refused_by_safe_load(e):
                raise UserError(f"{checkpoint / STATE_FILE}: {SAFE_LOAD_REFUSAL}; start again "
                                "with --overwrite") from None
            # torch's own message suggests weights_only=False: never, for a file we wrote
            raise UserError(f"{checkpoint / STATE_FILE}: the training checkpoint is damaged "
                            f"({(str(e).splitlines() or [type(e).__name__])[0][:120]}); start "
                            "again with --overwrite") \
                from None
        self.model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        # The optimizer's groups hold the lr the checkpoint's schedule set last; a resume into a
        # longer run (--max-steps) rebuilt the schedule, whose lambdas give the lr from here (the
        # same value for an unchanged schedule, so an exact resume stays exact).
        for group, lam, base in zip(optimizer.param_groups, scheduler.lr_lambdas,
                                    scheduler.base_lrs):
            group["lr"] = base * lam(scheduler.last_epoch)
        rng = saved["rng"]
        random.setstate(_as_tuples(rng["python"]))
        torch.set_rng_state(rng["torch"].cpu())
        np.random.set_state(_numpy_state_from_tensors(rng["numpy"]))
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])
        lines = []
        if (self.out / LOG_FILE).is_file():  # drop entries of steps the checkpoint does not hold
            lines = [line for line in (self.out / LOG_FILE).read_text().splitlines()
                     if line.strip() and json.loads(line)["step"] <= progress["step"]]
        if self.is_main:
            (self.out / LOG_FILE).write_text("".join(line + "\n" for line in lines))
        return progress

    def _check_same_recipe(self, saved: dict[str, Any]) -> None:
        current = self.config.to_dict()
        changed = [f"{section}.{key}" for section in ("model", "data", "training")
                   for key in set(saved[section]) | set(current[section])
                   if saved[section].get(key) != current[section].get(key)
                   and not (section == "training" and key in RESUMABLE_CHANGES)]
        if changed:
            raise UserError(f"cannot resume {self.out}: the recipe changed since the checkpoint "
                            f"({', '.join(sorted(changed))})")
        longer = [f"training.{key} {saved['training'].get(key)} -> {current['training'].get(key)}"
                  for key in ("epochs", "max_steps")
                  if saved["training"].get(key) != current["training"].get(key)]
        if longer:
            log.warning("warning: resuming with %s: the learning-rate schedule is rebuilt for the new "
                        "length, so the steps from here differ from the original run's",
                        ", ".join(longer))

    def _write_summary(self, state: dict[str, Any], total: int,
                       recent: deque[float]) -> dict[str, Any]:
        data = self._data()
        metrics = {
            "steps": state["step"],
            "total_steps": total,
            "train_loss": sum(recent) / len(recent) if recent else None,  # last <= 20 steps
            "val_loss": state["val_loss"],
            "best_val_loss": state["best_val_loss"],
            "best_step": state["best_step"],
            "train_seconds": round(state["elapsed"], 1),
            "seconds_per_step": round(state["elapsed"] / max(1, state["step"]), 3),
            "device": str(self.model.device),
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "train_queries": len({q for q, _ in data.train_pairs}),
            "train_pairs": len(data.train_pairs),
            "validation_queries": len({q for q, _ in data.validation_pairs}),
            "queries_with_random_negatives": data.num_random_filled,
        }
        summary = {"recipe": self.config.to_dict(),
                   "recipe_file": str(self.config.source) if self.config.source else None,
                   "metrics": metrics}
        if self.is_main:
            with atomic_path(self.out / SUMMARY_FILE) as tmp:
                tmp.write_text(json.dumps(summary, indent=2) + "\n")
            for kept in ("best", "last"):
                self._add_training_to_card(self.out / kept, kept, metrics)
        return summary

    def _add_training_to_card(self, folder: Path, which: str, metrics: dict[str, Any]) -> None:
        """The model card's training section: recipe, data, steps, validation loss."""
        card = folder / CARD_FILE
        if not card.is_file():
            return
        data = self.config.data
        chosen = (f"the lowest validation loss ({metrics['best_val_loss']:.4f}, step "
                  f"{metrics['best_step']})" if which == "best" and metrics["best_step"]
                  else f"the last step ({metrics['steps']})")
        recipe = Path(self.config.source).name if self.config.source else "in code"
        section = ["", "## Training", "",
                   f"- recipe: `{recipe}` (all of it in `../{RECIPE_FILE}` beside this folder)",
                   f"- lengths: queries {data.query_max_length} tokens, passages "
                   f"{data.passage_max_length}",
                   f"- data: {data.collection}:{data.split}, {metrics['train_queries']} queries "
                   f"({metrics['train_pairs']} pairs), {data.num_negatives} "
                   f"{data.negatives.source} negative(s) per query, "
                   f"{metrics['validation_queries']} queries held out",
                   f"- {metrics['steps']} steps of {self.cfg.batch_size} queries "
                   f"x {self.cfg.grad_accumulation}, learning rate {self.cfg.learning_rate:g}, "
                   f"{metrics['train_seconds']:.0f} s on {metrics['device']}",
                   f"- this folder ({which}) holds {chosen}"]
        rows = measured_rows(Path(self.config.source)) if self.config.source else []
        if rows:
            section += ["", "## Measured with this recipe", "",
                        "Rows of this repository's regression files that train this recipe: "
                        "means over each row's seeds, on the device its source line names "
                        "(this folder is one training of it; its own seed is in the recipe).",
                        "", *rows]
        with atomic_path(card) as tmp:
            tmp.write_text(card.read_text() + "\n".join(section) + "\n")


def _numpy_state_to_tensors(state: tuple) -> dict[str, Any]:
    """numpy's RNG state as tensors and numbers, so ``torch.load(weights_only=True)`` reads it."""
    name, keys, pos, has_gauss, cached = state
    return {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached": float(cached)}


def _numpy_state_from_tensors(state: dict[str, Any]) -> tuple:
    return (state["name"], state["keys"].numpy().astype(np.uint32), state["pos"],
            state["has_gauss"], state["cached"])


def _as_tuples(value: Any) -> Any:
    """``random.setstate`` needs tuples where serialisation may have produced lists."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def _hold_lock(folder: Path) -> int | None:
    """An exclusive lock on ``folder`` (an earlier run set aside), held while the returned
    descriptor stays open: the system releases it when this process ends, even by SIGKILL.
    None where the system has no ``flock`` (then the folder's process id is all there is)."""
    if fcntl is None:
        return None
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _locked(folder: Path, pid: int) -> bool:
    """Whether a training that set ``folder`` aside still runs: it holds the folder's lock
    (:func:`_hold_lock`). Without ``flock``, whether a process of its id other than this one
    lives."""
    if fcntl is None:
        return pid != os.getpid() and process_alive(pid)
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def _minutes(seconds: float) -> str:
    """A duration as a person reads it in a log: 45 s, 12.5 min, 3.2 h."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"
