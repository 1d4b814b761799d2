"""How a library schedule enters the registry: :func:`register` on its generator, when its
module is imported. Apart from :mod:`.registry` (which looks schedules up and imports the
library) so that the library's modules import this one and the registry imports them without a
circle."""

from __future__ import annotations

from typing import Callable, NamedTuple

from .schedule import Schedule

Generator = Callable[..., Schedule]
# sizes(pp, microbatches, vpp, options) -> (model chunks, an upper bound on the actions): what a
# run needs, known from the parameters alone, before anything is built
Sizes = Callable[[int, int, int, dict], "tuple[int, int]"]
# closed_form(pp, microbatches, vpp) -> bubble ratio under uniform costs (F = I = W, B = 2F, no
# communication), of the makespan (``closed_form_basis="makespan"``) or of each stage's own span
# from its first to its last action (``"own"``, how the zero-bubble paper counts)
ClosedForm = Callable[[int, int, int], float]
# work(pp, microbatches, vpp, actions) -> what building the schedule costs, counted in actions
# of the engine (about 14 us each): for generators whose construction grows faster than the
# actions they emit (measured by benchmarks/bench_fuzz.py's finds), so the one size budget
# counts what they really cost
Work = Callable[[int, int, int, int], int]


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class ScheduleSpec(NamedTuple):
    name: str
    generate: Generator
    summary: str
    closed_form: ClosedForm | None = None
    formula: str = ""
    default_vpp: int = 1
    aliases: tuple[str, ...] = ()
    variable_vpp: bool = False   # takes any --vpp (interleaved); else fixed at default_vpp
    closed_form_basis: str = "makespan"   # or "own": see ClosedForm
    sizes: Sizes | None = None   # default: pp x vpp chunks, 3 actions per stage and microbatch
    work: Work | None = None     # default: building costs what the actions cost

    def size_of(self, pp: int, microbatches: int, vpp: int, options: dict | None = None
                ) -> tuple[int, int]:
        """(model chunks, most actions) of the schedule at these sizes, without building it."""
        if self.sizes is not None:
            return self.sizes(pp, microbatches, vpp, options or {})
        return pp * vpp, 3 * pp * vpp * microbatches

    def work_of(self, pp: int, microbatches: int, vpp: int, actions: int) -> int:
        """What building the schedule costs, in engine actions (see :data:`Work`)."""
        if self.work is None:
            return actions
        return max(actions, self.work(pp, microbatches, vpp, actions))
    needs_costs: bool = False   # takes stage_costs=... (auto); listed apart from the hand-made
    flushes: bool = True        # False: runs ``iterations`` minibatches without a flush (2BW)
    shares_weights: bool = False   # True: two stages run on one set of weights (DualPipe)
    # what the schedule is for the runtimes (schedules/runtimes.py) and the engine's torch modes
    torch_class: str | None = None   # torch's class that runs it (get_schedule_class's name,
                                     # e.g. "1F1B"); None: torch runs it from a CSV
    torch_runtime: str = "torch-multi"   # "torch-single": its class is PipelineScheduleSingle
                                         # (TORCH_SINGLE_STAGE; register() sets it)
    # Megatron-LM's schedule that runs it: "1f1b", "interleaved", "zero-bubble" (the
    # zero-bubble fork's own layout, --enable-zero-bubble) or "zero-bubble-v" (the fork's V
    # schedule, --zero-bubble-v-schedule, in the memory setup megatron_args.ZB_V_SCHEDULES names)
    megatron: str | None = None
    # the planner's lower bound holds (every rank's compute share, the forward's reach):
    # False where overlapped F/B pairs hide collectives and microbatches enter at both ends
    lower_bound: bool = True
    default_for: str = ""   # the schedule a run without --schedule takes: "vpp=1" or "vpp>1"


# torch's classes that run on its single-stage runtime, PipelineScheduleSingle
# (torch/distributed/pipelining/schedules.py 2.13: ScheduleGPipe, Schedule1F1B); every other
# class, and any schedule torch runs from a CSV, runs on _PipelineScheduleRuntime
TORCH_SINGLE_STAGE = ("GPipe", "1F1B")
MEGATRON_SCHEDULES = ("1f1b", "interleaved", "zero-bubble", "zero-bubble-v")
ZERO_BUBBLE_FORK = ("zero-bubble", "zero-bubble-v")   # the ones only the zero-bubble fork runs
DEFAULT_FOR = ("vpp=1", "vpp>1")


def fb_sizes(pp: int, microbatches: int, vpp: int, options: dict) -> tuple[int, int]:
    """Sizes of a schedule whose backward is one B: a forward and a backward per stage-mb."""
    return pp * vpp, 2 * pp * vpp * microbatches


LIBRARY: dict[str, ScheduleSpec] = {}   # name -> spec, in the order the modules registered
ALIASES: dict[str, str] = {}            # alias -> name


def register(name: str, *, summary: str, closed_form: ClosedForm | None = None,
             formula: str = "", default_vpp: int = 1, aliases: tuple[str, ...] = (),
             variable_vpp: bool = False, closed_form_basis: str = "makespan",
             sizes: Sizes | None = None, work: Work | None = None, flushes: bool = True,
             shares_weights: bool = False, needs_costs: bool = False,
             torch_class: str | None = None, megatron: str | None = None,
             lower_bound: bool = True, default_for: str = ""
             ) -> Callable[[Generator], Generator]:
    """Decorator: ``@register("1f1b", summary=...)`` on ``def generate(pp, microbatches, vpp=1, **opts)``."""
    if megatron is not None and megatron not in MEGATRON_SCHEDULES:
        raise RuntimeError(f"schedule {name!r}: megatron={megatron!r}, expected one of "
                           f"{', '.join(MEGATRON_SCHEDULES)}")
    if default_for and default_for not in DEFAULT_FOR:
        raise RuntimeError(f"schedule {name!r}: default_for={default_for!r}, expected one of "
                           f"{', '.join(DEFAULT_FOR)}")

    def deco(fn: Generator) -> Generator:
        if name in LIBRARY:
            raise RuntimeError(f"schedule {name!r} registered twice")
        if default_for and any(s.default_for == default_for for s in LIBRARY.values()):
            raise RuntimeError(f"schedule {name!r}: a default for {default_for} is registered "
                               "already")
        runtime = "torch-single" if torch_class in TORCH_SINGLE_STAGE else "torch-multi"
        LIBRARY[name] = ScheduleSpec(name, fn, summary, closed_form, formula, default_vpp, aliases,
                                        variable_vpp, closed_form_basis, sizes=sizes, work=work,
                                        flushes=flushes, shares_weights=shares_weights,
                                        needs_costs=needs_costs,
                                        torch_class=torch_class, torch_runtime=runtime,
                                        megatron=megatron, lower_bound=lower_bound,
                                        default_for=default_for)
        for alias in aliases:
            if alias in ALIASES or alias in LIBRARY:
                raise RuntimeError(f"schedule alias {alias!r} registered twice")
            ALIASES[alias] = name
        return fn

    return deco
