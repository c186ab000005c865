"""``cirbench sweep``: the same number of hyperparameter trials for every method, as ordinary
grid rows ``<method>:trial<k>`` with the trial's values as their ``--set`` scope, so a sweep
is resumable, parallel and runs on any launcher like any grid; each trial's configuration is
in its ``runs`` row. Trial 0 is the defaults; the others draw from the method's
``Config.search_space`` (:mod:`cirbench.method.search`). Selection (per method, noise rate and
seed, on the held-out split) is the report's: :mod:`cirbench.report.tables.tuned`."""

from __future__ import annotations

from cirbench.backbones.registry import BACKBONES
from cirbench.plugins import Discovery
from cirbench.results.labels import trial_label
from cirbench.method.search import trial_values


class SweepError(ValueError):
    """A sweep that cannot run (a variant label, no trials); raised before any work."""


def sweep_rows(methods: list[str], trials: int, discovery: Discovery, backbone: str,
               seed: int = 0) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The grid labels (every method's trials 0 to ``trials - 1``) and their ``--set``
    overrides (``{label: {key: value}}``, values as text)."""
    if trials < 1:
        raise SweepError(f"--trials {trials}: a sweep needs at least one trial (trial 0 is the defaults)")
    variants = [m for m in methods if ":" in m]
    if variants:
        raise SweepError(f"--methods {', '.join(variants)}: a sweep tunes registered methods, not labelled variants")
    default_lr = getattr(BACKBONES.get(backbone), "default_lr", None)
    if default_lr is None:
        raise SweepError(f"backbone {backbone!r} names no default_lr on its factory: the lr trials scale it")
    labels, overrides = [], {}
    for method in methods:
        config_cls = discovery.methods.get(method).Config
        defaults = config_cls()
        base = {name: getattr(defaults, name) for name in config_cls.search_space}
        base["lr"] = defaults.lr if defaults.lr is not None else default_lr
        for trial in range(trials):
            label = trial_label(method, trial)
            labels.append(label)
            values = trial_values(method, config_cls, trial, base, seed)
            if values:
                overrides[label] = {name: f"{value:.4g}" for name, value in values.items()}
    return labels, overrides
