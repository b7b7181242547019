"""``cbs-ray plan --space SPACE --full-budget-tokens T``: one decision for the run you will train.

Given the full run's budget in tokens, the plan sets D = T tokens in samples of the spec's tokens per sample
(rounded down to a whole number of ``training.eval_every_samples``, as ``training.budget_tokens`` is; refused where
samples hold no fixed number of tokens: padded texts), then chooses what to run by one rule (``choose_method``):

* a **from-scratch search at D** where it fits what you can afford: its trials (``search.num_trials``, a grid's
  points or bisect's most, plus the repeats) × D samples ≤ ``--afford-samples``; its decision is for D;
* else **the ladder** with D as its full budget: its runs train to ``ladder.fraction`` of D (the rungs are fractions
  of that) and its prediction carries B_crit to D; its decision is for D. The plan states the most it trains
  (``ladder.cap``), which a run that reaches the smallest batch's loss earlier does not.

``--afford-samples`` defaults to what the space's own from-scratch search trains at its own budget (its trials ×
its ``training.budget_samples``): the search you have shown you can run. A full run at the space's own budget then
plans that search; a larger one, the ladder.

The plan (what it runs, its samples, the tokens per parameter at D) is printed first, then the chosen search runs
through the same ``run_search`` the Python API uses, and the last line is ``Decision for the full run (T tokens):
...``, summary.json's ``decision`` (its ``for_budget_samples`` is D). ``--dry-run``: the plan and the chosen
method's own dry-run outline; nothing trains. ``search.method`` is the plan's to choose (a ``--set`` of it is
overridden).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from cbs_ray.maths.budget import samples_for_tokens
from cbs_ray.records.names import resume_command
from cbs_ray.records.storage import ReportError
from cbs_ray.spec.command_line import OneLineParser, check_output_arg, unforeseen_error
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec, spec_to_dict
from cbs_ray.spec.resolve import packing_on
from cbs_ray.spec.schema import SearchSpec

__all__ = ["SCRATCH", "LADDER", "PlanChoice", "full_budget_samples", "choose_method", "scratch_trials",
           "plan_sets", "plan_spec", "next_step_at_d", "plan_main", "decision_line"]

SCRATCH = "scratch"
LADDER = "ladder"


@dataclass(frozen=True)
class PlanChoice:
    """What the plan runs (``SCRATCH`` or ``LADDER``) and the sentence that says why."""

    method: str
    because: str


def full_budget_samples(tokens: float, tokens_per_sample: Optional[int], eval_every_samples: int) -> int:
    """D: ``tokens`` in whole samples of ``tokens_per_sample`` tokens, rounded down to a whole number of report
    intervals (``maths.budget.samples_for_tokens``, as ``training.budget_tokens`` is). ``SpecError`` (one line) for
    tokens that are not a finite positive number, samples without a fixed token count (None), or fewer tokens than
    one report interval holds."""
    if not (isinstance(tokens, (int, float)) and math.isfinite(tokens) and tokens > 0):
        raise SpecError(f"--full-budget-tokens: must be a finite positive number of tokens, got {tokens:g}")
    if tokens_per_sample is None:
        raise SpecError("--full-budget-tokens: the spec's samples hold no fixed number of tokens (padded texts), so "
                        "tokens cannot be counted in samples; a causal LM with data.packing: true (full blocks of "
                        "data.max_seq_length tokens) can, or plan in samples with cbs-ray search --set "
                        "training.budget_samples=D")
    samples = samples_for_tokens(int(tokens), tokens_per_sample, eval_every_samples)[0]
    if samples <= 0:
        raise SpecError(f"--full-budget-tokens: {tokens:g} tokens is less than one report interval "
                        f"({eval_every_samples} samples of {tokens_per_sample} tokens)")
    return samples


def choose_method(*, scratch_samples: int, afford_samples: int) -> PlanChoice:
    """The plan's rule: a from-scratch search at D where the samples it trains (``scratch_samples``: its trials × D)
    fit ``afford_samples``; else the ladder, whose runs train to a fraction of D."""
    if scratch_samples <= afford_samples:
        return PlanChoice(SCRATCH, f"a from-scratch search at D trains {scratch_samples} samples, within the "
                                   f"{afford_samples} affordable: its decision is for D")
    return PlanChoice(LADDER, f"a from-scratch search at D would train {scratch_samples} samples, more than the "
                              f"{afford_samples} affordable: the ladder trains to a fraction of D and predicts B_crit "
                              f"at D")


def scratch_trials(spec: SearchSpec) -> int:
    """The most trials a from-scratch search of ``spec`` trains to its budget: its trials (``tune.search_space
    .num_trials``: a grid's points, bisect's most) and the repeats (``search.repeats`` - 1 more per batch size).
    Early stopping ends some sooner; this is the most."""
    from cbs_ray.tune.search_space import num_trials

    return num_trials(spec) + len(spec.batch_sizes) * (spec.search.repeats - 1)


def plan_sets(space: Optional[str], overrides: Sequence[str], method: str, budget_samples: int) -> list[str]:
    """The ``--set``s of the search the plan runs: the user's overrides, then the budget in samples (a budget in
    tokens or epochs the space sets unset, a packing it implied kept) and the method."""
    spec = load_spec(space, overrides)
    keep_packing = ["data.packing=true"] if spec.data.packing is None and packing_on(spec) else []
    unset = [f"training.{key}=null" for key in ("budget_tokens", "budget_epochs")
             if getattr(spec.training, key) is not None]
    return [*overrides, *keep_packing, f"training.budget_samples={budget_samples}", *unset, f"search.method={method}"]


def plan_spec(space: Optional[str], overrides: Sequence[str], method: str, budget_samples: int) -> SearchSpec:
    """The spec at the full budget D as ``method`` runs it (``plan_sets``)."""
    return load_spec(space, plan_sets(space, overrides, method, budget_samples))


def next_step_at_d(step: Optional[str], space: Optional[str], sets: Sequence[str]) -> Optional[str]:
    """The decision's next step (``analysis.decision.search_command``'s ``cbs-ray search [--space S] --set ...
    [FLAGS]``, written from the recorded spec: a space other than the default is ``<your space>`` there) as a search
    on the plan's own space at D: ``--space space``, the plan's ``sets`` (``plan_sets``: the user's, D, the method),
    then those of the step's ``--set``s that change that spec (a bound's grid, the repeats, another method) and its
    flags. Every value is quoted for the shell where it needs it. None: no next step."""
    if not step:
        return None
    from cbs_ray.analysis.decision import YOUR_SPACE

    words = shlex.split(step.replace(f"--space {YOUR_SPACE}", ""))
    own, flags, i = [], [], 2  # after "cbs-ray search"
    while i < len(words):
        if words[i] in ("--set", "--space"):
            if words[i] == "--set":
                own.append(words[i + 1])
            i += 2
        else:
            flags.append(words[i])
            i += 1
    ran = spec_to_dict(load_spec(space, sets))
    changes = [s for s in own if _changes(space, sets, s, ran)]
    keys = {s.split("=", 1)[0] for s in changes}
    kept = [s for s in sets if s.split("=", 1)[0] not in keys]
    parts = ["cbs-ray search"] + ([f"--space {shlex.quote(space)}"] if space else [])
    return " ".join(parts + [f"--set {shlex.quote(s)}" for s in [*kept, *changes]] + flags)


def _changes(space: Optional[str], sets: Sequence[str], one: str, ran: dict) -> bool:
    """Whether ``--set one`` after ``sets`` gives another spec than ``ran`` (one that is refused alone: kept)."""
    try:
        return spec_to_dict(load_spec(space, [*sets, one])) != ran
    except SpecError:
        return True


def _parse(argv: Optional[list[str]], prog: str) -> argparse.Namespace:
    parser = OneLineParser(prog=prog, description="One decision for the full run: cbs-ray plan --space FILE "
                                                  "--full-budget-tokens T [--afford-samples N] [--dry-run]")
    parser.add_argument("--space", help="search-space YAML (default: the embedded tiny CPU default)")
    parser.add_argument("--full-budget-tokens", type=float, required=True, metavar="T",
                        help="the tokens the full run will train on (D = T / the spec's tokens per sample, rounded "
                             "down to a multiple of training.eval_every_samples)")
    parser.add_argument("--afford-samples", type=float, metavar="N",
                        help="the most samples the search may train: a from-scratch search at D runs where its "
                             "trials x D fit, else the ladder (default: what the space's own from-scratch search "
                             "trains at its own budget)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a spec field (search.method is the plan's)")
    parser.add_argument("--output", help="directory for the report (default ./cbs_results/<name>[-ladder])")
    parser.add_argument("--address", help="Ray cluster address (e.g. auto); default: start Ray locally")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan and the chosen method's outline; train nothing")
    parser.add_argument("--verbose", action="store_true", help="Tune's own progress tables and the workers' logs")
    return parser.parse_args(argv)


def _plan(args: argparse.Namespace) -> tuple[SearchSpec, list[str], int]:
    """(the chosen spec at D, the plan's lines, D); ``SpecError`` for a plan that cannot be made."""
    from cbs_ray.tune.prepare import prepare_for_outline, sample_tokens

    if args.afford_samples is not None and not (math.isfinite(args.afford_samples) and args.afford_samples >= 1):
        raise SpecError(f"--afford-samples: must be a finite number of samples, at least 1, got "
                        f"{args.afford_samples:g}")
    own = load_spec(args.space, args.overrides)
    if own.auto_batch_sizes:
        raise SpecError("search.batch_sizes: auto is not planned (the grid is what the plan costs); give the grid, "
                        "e.g. the one cbs-ray search --probe suggests")
    planned = prepare_for_outline(own)
    per_sample = sample_tokens(own, planned)
    d = full_budget_samples(args.full_budget_tokens, per_sample, own.training.eval_every_samples)
    assert per_sample is not None  # full_budget_samples refused it
    afford = int(args.afford_samples) if args.afford_samples else scratch_trials(own) * planned.budget_samples
    afford_from = ("--afford-samples" if args.afford_samples else
                   f"the space's own search: {scratch_trials(own)} trials x {planned.budget_samples} samples")
    scratch = plan_spec(args.space, args.overrides, SCRATCH, d)
    choice = choose_method(scratch_samples=scratch_trials(scratch) * d, afford_samples=afford)
    whole = int(args.full_budget_tokens) // per_sample
    rounded = (f", rounded down from {whole} to a multiple of training.eval_every_samples "
               f"({own.training.eval_every_samples})" if whole != d else "")
    lines = [f"plan: the full run: {int(args.full_budget_tokens)} tokens = D {d} samples of {per_sample} tokens"
             f"{rounded}",
             f"plan: affordable {afford} samples ({afford_from}); {choice.because}"]
    spec = scratch
    if choice.method == SCRATCH:
        lines.append(f"plan: runs cbs-ray search at training.budget_samples={d}: {scratch_trials(scratch)} trials "
                     f"x {d} samples (at most; early stopping ends some sooner)")
    else:
        spec = plan_spec(args.space, args.overrides, LADDER, d)
        ld = spec.section(LADDER).resolve(spec, d, None)  # the ladder's section resolves itself
        most = ld.ladder_samples_at_most
        lines.append(f"plan: runs the ladder (search.method=ladder) with D = {d}: {len(ld.batches)} batches x "
                     f"{ld.seeds} seeds, the smallest to {ld.stop_samples} samples ({ld.stop_samples / d:.3g} of D), "
                     f"the rungs {ld.rung_evaluations[0] if ld.rung_evaluations else '-'}..{ld.stop_samples}; at most "
                     f"{most} samples ({most / afford:.2g} x affordable: each larger batch stops once it reaches the "
                     f"smallest's loss, at most ladder.cap x the fraction)")
        if most > afford:
            lines.append(f"  warning: the ladder may train up to {most} samples, more than the {afford} affordable; "
                         f"fewer ladder.seeds, a smaller ladder.fraction or ladder.cap, or fewer batch sizes bound it")
    return spec, lines, d


def plan_main(argv: Optional[list[str]] = None, prog: str = "cbs-ray plan") -> int:
    try:
        args = _parse(argv, prog)
    except SystemExit as e:  # argparse printed its one-line usage error
        return 2 if e.code else 0
    from cbs_ray.tune import api
    from cbs_ray.tune.prepare import check_before_ray, output_dir_for, regime_lines, with_model_config

    try:
        check_output_arg(args.output)
        spec, lines, d = _plan(args)
        for line in lines:
            print(line, flush=True)
        if args.dry_run:  # the chosen method's own dry run (the tokens per parameter at D and at the rungs in it)
            check_before_ray(spec, output_dir_for(spec, args.output), dry_run=True)
            for line in api.dry_run_lines(spec):
                print(line, flush=True)
            return 0
        from cbs_ray.tune.prepare import prepare_for_outline

        for line in regime_lines(spec, with_model_config(spec, prepare_for_outline(spec))):
            print(f"plan: {line}", flush=True)
        result = api.run_search(spec, address=args.address, output_dir=args.output, verbose=args.verbose)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        from cbs_ray.tune.runner import DoesNotFit

        if isinstance(e, (DoesNotFit, ReportError)):
            print(f"error: {e}", file=sys.stderr)
            return 1
        return unforeseen_error(e)
    except KeyboardInterrupt as e:
        path = getattr(e, "experiment_path", None)
        again = resume_command(path) if path else "cbs-ray search --resume EXPERIMENT_DIR"
        print(f"interrupted: finished trials and checkpoints are kept; continue with: {again}", file=sys.stderr)
        return 130
    sets = plan_sets(args.space, args.overrides, spec.search.method, d)
    step = next_step_at_d(getattr(result.decision, "next_step", None), args.space, sets)
    print(decision_line(result.decision, args.full_budget_tokens, d, step), flush=True)
    return 0


def decision_line(decision, tokens: float, budget_samples: int, next_step: Optional[str] = None) -> str:
    """The plan's last line: summary.json's ``decision`` for the full run (its sentence without ``Decision:``), its
    next step replaced by ``next_step`` where given (``next_step_at_d``: the plan's space, its settings and D)."""
    head = f"Decision for the full run ({int(tokens)} tokens): "
    if decision is None:
        return head + "none (the summary holds no decision)"
    text = decision.text.removeprefix("Decision: ") if decision.text else f"batch {decision.batch_size}"
    if next_step and getattr(decision, "next_step", None):
        text = text.replace(f"next: {decision.next_step}", f"next: {next_step}")
    if decision.for_budget_samples != budget_samples:  # every method's decision is for its spec's budget, D here
        text += f" [for {decision.for_budget_samples} samples, not D = {budget_samples}]"
    return head + text
