"""HABIT against its release (``Lee-zixu/HABIT``): the soft labels, the DBSCAN mask, the three
loss terms and the total, and the previous-epoch lookup.

The release's ``HABIT.forward`` runs on an object built with ``object.__new__`` whose
encoders are fakes returning the seeded features: the fused pass's hidden states are the
32 fused-query tokens followed by the composed feature (the release reads positions ``:32``
and ``32``), the target pass's are the 32 target tokens, and both projections are the
identity (the inputs are unit vectors, and the release normalises them again). The batch is
256 because the release hard-codes it (``expand(-1, 256)``, ``torch.ones(256)``); 32 tokens
because it hard-codes those. DBSCAN is scikit-learn's on both sides; the release's two calls
are recorded by wrapping the ``DBSCAN`` name its module binds (the wrapper calls
scikit-learn's own ``fit_predict`` and keeps its result). Nothing random enters a term.

The previous-epoch lookup is ``train.py``'s ``train`` loop run twice (epochs 0 and 1) on a
shuffled order of 12 samples in batches of 4, with a fake model that records which samples'
soft labels it is handed as "historical": the port's ``HABIT.past`` on the same two orders
(``history = batch_position`` is the release's). The total is ``train.py``'s
``loss_rank + 0.1 loss_soft + 10 loss_kl``, read from what the loop hands its AMP scaler,
the fake model returning the release's own loss terms of the main forward.
"""

from __future__ import annotations

import sys
import types
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from parity import harness

from cirbench.backbones.base import max_token_similarity
from cirbench.settings.config import build_config
from cirbench.method import Batch
from cirbench_methods.habit import (HABIT, HABITConfig, SampleHistory, batch_matched_min_samples, dbscan_outliers,
                                    rcl_rows)

RELEASE = harness.Release(
    repo="Lee-zixu/HABIT",
    files={"lavis/models/blip2_models/HABIT.py": "55-103, 177-262, 264-368",
           "train.py": "190-224, 266-323"},
)
SEED = 0
B, Q, E = 256, 32, 8  # the release hard-codes the batch (256) and the query tokens (32)
HISTORY_SAMPLES, HISTORY_BATCH = 12, 4

NOT_COMPARABLE = {
    "any batch but 256": "the release fails at any other batch size (256 hard-coded in robust_infoNCE, forward and "
                         "cal_Knowledge_Consistency); the port takes the batch's size, so every term is compared at 256",
}


def make_inputs(seed: int) -> dict[str, torch.Tensor]:
    g = harness.generator(seed)
    composed = harness.unit(g, B, E)
    fused_tokens = harness.unit(g, B, Q, E)
    # targets correlated with the fused tokens by a per-sample amount, so the soft labels spread
    mix = torch.rand(B, 1, 1, generator=g, dtype=torch.float64) * 2.0
    targets = F.normalize(harness.randn(g, B, Q, E) + mix * fused_tokens, dim=-1)
    # last epoch's soft labels: half in a dense cluster, half a sparse tail (many DBSCAN outliers)
    previous_labels = torch.where(torch.rand(B, generator=g, dtype=torch.float64) < 0.5,
                                  0.75 + 0.03 * harness.randn(g, B), torch.rand(B, generator=g, dtype=torch.float64))
    previous_labels = previous_labels.clamp(0.01, 1.0).float().double()  # the release keeps them in float32
    previous_sim = harness.randn(g, B, B).tanh()
    # saturated rows: queries 0-7 on e_1, the tokens of target 5 on e_1 and every other target
    # token at least 0.6 away along it, so p_i5 > 1 - 1e-7 off the diagonal (RCL's clamps differ)
    saturated_composed = harness.unit(g, B, E)
    saturated_composed[:8] = torch.eye(E, dtype=torch.float64)[0]
    along = -(0.6 + 0.4 * torch.rand(B, 2, 1, generator=g, dtype=torch.float64))
    rest = harness.unit(g, B, 2, E - 1) * (1.0 - along ** 2).sqrt()
    saturated_targets = torch.cat([along, rest], dim=-1)
    saturated_targets[5] = torch.eye(E, dtype=torch.float64)[0]
    order_0 = torch.randperm(HISTORY_SAMPLES, generator=g).double()
    order_1 = torch.randperm(HISTORY_SAMPLES, generator=g).double()
    return {"composed": composed, "fused_tokens": fused_tokens, "targets": targets, "previous_labels": previous_labels,
            "previous_sim": previous_sim, "saturated_composed": saturated_composed,
            "saturated_targets": saturated_targets, "order_0": order_0, "order_1": order_1}


# ----------------------------------------------------------------------------- the release


STUBS = [*harness.LAVIS_STUBS]


class _QFormer:
    """The Q-Former's ``bert``: the fused call (token ids given) returns the fused tokens and
    the composed feature at position 32; the target call returns the target tokens."""

    def __init__(self, inputs: dict[str, torch.Tensor]) -> None:
        self.inputs = inputs

    def bert(self, *args: Any, **kwargs: Any) -> types.SimpleNamespace:
        if args:
            hidden = torch.cat([self.inputs["fused_tokens"], self.inputs["composed"].unsqueeze(1)], dim=1)
        else:
            hidden = self.inputs["targets"]
        return types.SimpleNamespace(last_hidden_state=hidden)


def _release_model(module: types.ModuleType, inputs: dict[str, torch.Tensor]) -> nn.Module:
    model = object.__new__(module.HABIT)
    nn.Module.__init__(model)
    model.visual_encoder = model.ln_vision = lambda x: x
    model.text_proj = model.vision_proj = lambda x: x
    model.query_tokens = torch.zeros(1, Q, E, dtype=torch.float64)
    model.tokenizer = lambda text, **kwargs: harness.Tokens.blank(len(text), 2)
    model.Qformer = _QFormer(inputs)
    model.device = torch.device("cpu")
    model.max_txt_len = 2
    model.soft_margin_loss = module.SoftEstimationMarginLoss(margin=0.5)
    model.soft_labels, model.sim = [], []
    model.KLDivLoss = nn.KLDivLoss(reduction="mean")
    return model


def _recording_dbscan(record: list[np.ndarray]) -> type:
    from sklearn.cluster import DBSCAN

    class Recording(DBSCAN):
        def fit_predict(self, X, y=None, sample_weight=None):  # noqa: N803
            labels = super().fit_predict(X, y, sample_weight=sample_weight)
            record.append(np.asarray(labels).copy())
            return labels

    return Recording


def _load_train(release_dir: Path) -> types.ModuleType:
    """``train.py`` with its heavy imports stubbed, its argument parser given no arguments,
    and its module-level side effects (warning filter, thread count) undone."""
    threads = torch.get_num_threads()
    with warnings.catch_warnings(), mock.patch.object(sys, "argv", ["train.py"]):
        module = harness.load_release_module(
            release_dir, "train.py", name="_release_habit_train",
            stubs=["clip", "datasets", "test", "data_utils", "setproctitle", "lavis", "lavis.models", "transformers",
                   "tqdm", "torchvision"])
    torch.set_num_threads(threads)
    return module


class _HistoryModel:
    """What ``train`` calls ``model``: records the historical soft labels it is handed and
    appends this step's "soft labels" (the samples' ids), as ``HABIT.forward`` appends its."""

    def __init__(self, losses: dict[str, torch.Tensor]) -> None:
        self.soft_labels: list[torch.Tensor] = []
        self.sim: list[torch.Tensor] = []
        self.received: list[torch.Tensor] = []
        self.losses = losses

    def train(self) -> None:
        pass

    def apply(self, fn) -> None:
        pass

    def __call__(self, samples, device, old_labels, epoch, old_sim):
        ids = samples["image"][:, 0]
        if epoch >= 1:
            self.received.append(torch.as_tensor(old_labels).double().clone())
        self.soft_labels.append(ids.clone())
        self.sim.append(torch.zeros(len(ids), len(ids)))
        return self.losses


def _release_history(release_dir: Path, inputs: dict[str, torch.Tensor],
                     losses: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids of the samples whose soft labels each epoch-1 step gets as historical (steps,
    batch), and the total loss ``train`` hands its scaler at the first epoch-1 step."""
    train_module = _load_train(release_dir)
    train_module.args.batch_size = HISTORY_BATCH  # its parser's defaults otherwise (dataset cirr)
    model = _HistoryModel(losses)
    scaler = mock.MagicMock()
    old_labels: Any = []
    old_sim: Any = []
    for epoch in (0, 1):
        order = inputs[f"order_{epoch}"]
        loader = [{"source_img_data": order[i:i + HISTORY_BATCH].unsqueeze(1), "target_img_data": order[i:i + HISTORY_BATCH],
                   "mod": {"str": ["caption"] * HISTORY_BATCH}} for i in range(0, HISTORY_SAMPLES, HISTORY_BATCH)]
        model.soft_labels, model.sim = [], []
        with harness.on_cpu(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            train_module.train(model, mock.MagicMock(), loader, scaler, epoch, {"eval": lambda s: s}, epoch + 1,
                               old_labels, old_sim)
        old_labels, old_sim = torch.cat(model.soft_labels), model.sim
    first_epoch_1 = HISTORY_SAMPLES // HISTORY_BATCH
    total = scaler.scale.call_args_list[first_epoch_1].args[0]
    return torch.stack(model.received), total


def release_terms(release_dir: Path, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    module = harness.load_release_module(release_dir, "lavis/models/blip2_models/HABIT.py", stubs=STUBS,
                                         real=harness.lavis_stand_ins(), name="_release_habit")
    record: list[np.ndarray] = []
    module.DBSCAN = _recording_dbscan(record)
    samples = {"image": torch.zeros(B, 1, 1, dtype=torch.float64), "target": torch.zeros(B, 1, 1, dtype=torch.float64),
               "text_input": ["caption"] * B}
    terms: dict[str, torch.Tensor] = {}
    with harness.on_cpu(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _release_model(module, inputs)
        epoch_0 = model(samples, "cpu", [], 0, [])
        model = _release_model(module, inputs)
        epoch_1 = model(samples, "cpu", inputs["previous_labels"], 1, inputs["previous_sim"])
        # the anchor: the release's first robust_infoNCE call (a mask of ones), its row-loss argmin
        _, anchor, _ = model.robust_infoNCE(
            inputs["composed"].unsqueeze(1).unsqueeze(1), inputs["targets"].permute(0, 2, 1), torch.ones(B))
        saturated, saturated_anchor, _ = model.robust_infoNCE(
            inputs["saturated_composed"].unsqueeze(1).unsqueeze(1), inputs["saturated_targets"].permute(0, 2, 1),
            torch.ones(B))
    terms["loss_rank_saturated"], terms["anchor_saturated"] = saturated, saturated_anchor
    # the soft labels the release appends for the next epoch (before the mask)
    terms["soft_labels"] = model.soft_labels[0]
    terms["anchor"] = anchor
    terms["dbscan_outlier_previous"] = torch.as_tensor(record[0] == -1)
    terms["dbscan_outlier_current"] = torch.as_tensor(record[1] == -1)
    terms["mask"] = torch.as_tensor((record[0] == -1) & (record[1] == -1)).logical_not()
    for name in ("loss_rank", "loss_soft"):
        terms[f"{name}_epoch0"] = epoch_0[name]
    for name in ("loss_rank", "loss_soft", "loss_kl"):
        terms[name] = epoch_1[name]
    received, total = _release_history(release_dir, inputs, epoch_1)
    terms["loss_total"] = total
    terms["history_previous_ids"] = received
    return terms


# ----------------------------------------------------------------------------- the port


class _Backbone:
    """The port's backbone: ``compose`` gives the composed feature at text position 0 and the
    fused-query tokens; ``text_proj`` is the identity; ``target_features`` the target tokens."""

    def __init__(self, inputs: dict[str, torch.Tensor]) -> None:
        self.inputs = inputs

    def compose(self, reference, text) -> types.SimpleNamespace:
        return types.SimpleNamespace(text=self.inputs["composed"].unsqueeze(1), query=self.inputs["fused_tokens"])

    def text_proj(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def target_features(self, target) -> torch.Tensor:
        return F.normalize(self.inputs["targets"], dim=-1)


def _port_method(config: HABITConfig, inputs: dict[str, torch.Tensor], steps_per_epoch: int, num_train: int) -> HABIT:
    method = object.__new__(HABIT)
    nn.Module.__init__(method)
    method.config = config
    method.backbone = _Backbone(inputs)
    method.context = types.SimpleNamespace(steps_per_epoch=steps_per_epoch, num_train=num_train)
    method.history = SampleHistory(num_train)
    method.by_position = {}
    return method


def _batch(index: torch.Tensor) -> Batch:
    return Batch(index=index.long(), reference=torch.zeros(len(index), 1, dtype=torch.float64),
                 target=torch.zeros(len(index), 1, dtype=torch.float64), text=None, texts=[])


def _port_history(config: HABITConfig, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The ids of the samples whose stored soft labels ``HABIT.past`` gives each epoch-1 step."""
    steps = HISTORY_SAMPLES // HISTORY_BATCH
    method = _port_method(config, inputs, steps, HISTORY_SAMPLES)
    received = []
    for epoch in (0, 1):
        order = inputs[f"order_{epoch}"].long()
        for i in range(steps):
            index = order[i * HISTORY_BATCH:(i + 1) * HISTORY_BATCH]
            batch, step = _batch(index), epoch * steps + i
            if epoch == 1:
                past = method.past(batch, epoch, step)
                received.append(past[0].double())
            tokens = torch.zeros(len(index), 1, 1)
            method.remember(batch, epoch, step, index.double(), torch.zeros(len(index), 1), tokens,
                            torch.zeros(len(index), len(index)))
    return torch.stack(received)


def port_terms(inputs: dict[str, torch.Tensor], readings: str) -> dict[str, torch.Tensor]:
    config = build_config(HABITConfig, {"readings": readings}, "habit")
    terms: dict[str, torch.Tensor] = {}
    method = _port_method(config, inputs, 1, B)
    composed, fused_tokens, targets = method.features(_batch(torch.arange(B)))
    sim = max_token_similarity(composed, targets)
    terms["anchor"] = torch.tensor(method.anchor(sim))
    label = method.batch_labels(sim, fused_tokens, targets)
    terms["soft_labels"] = label
    previous = inputs["previous_labels"].float()
    density = batch_matched_min_samples(config.dbscan_min_samples, config.dbscan_release_batch, B)
    terms["dbscan_outlier_previous"] = torch.as_tensor(dbscan_outliers(previous.numpy(), config.dbscan_eps, density))
    terms["dbscan_outlier_current"] = torch.as_tensor(dbscan_outliers(label.numpy(), config.dbscan_eps, density))
    terms["mask"] = method.keep_mask(label, previous, torch.ones(B, dtype=torch.bool))
    # the loss terms: the port's training step at epoch 0 (no history), then at epoch 1 with the
    # inputs' previous epoch (by batch position: the stored labels and similarity as given)
    batch = _batch(torch.arange(B))
    out_0 = method.training_step(batch, 0, 0)
    for name in ("rank", "soft"):
        terms[f"loss_{name}_epoch0"] = torch.tensor(out_0.components[name], dtype=torch.float64)
    method = _port_method(config, inputs, 1, B)
    if config.history == "batch_position":
        method.by_position[0] = (0, previous, inputs["previous_sim"])
    else:  # keyed by sample: the previous similarity is rebuilt from the stored features (here: this step's)
        method.history.write(batch.index, 0, previous, composed, targets)
    out_1 = method.training_step(batch, 1, 1)
    for name in ("rank", "soft", "kl"):
        terms[f"loss_{name}"] = torch.tensor(out_1.components[name], dtype=torch.float64)
    terms["loss_total"] = out_1.loss
    terms["history_previous_ids"] = _port_history(config, inputs)
    saturated = max_token_similarity(inputs["saturated_composed"], inputs["saturated_targets"])
    terms["loss_rank_saturated"] = rcl_rows(saturated, config.temperature, config.rcl_clamp).sum() / B
    terms["anchor_saturated"] = torch.tensor(_port_method(config, inputs, 1, B).anchor(saturated))
    return terms
