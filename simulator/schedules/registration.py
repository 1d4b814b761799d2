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


def fb_sizes(pp: int, microbatches: int, vpp: int, options: dict) -> tuple[int, int]:
    """Sizes of a schedule whose backward is one B: a forward and a backward per stage-mb."""
    return pp * vpp, 2 * pp * vpp * microbatches


LIBRARY: dict[str, ScheduleSpec] = {}   # name -> spec, in the order the modules registered
ALIASES: dict[str, str] = {}            # alias -> name


def register(name: str, *, summary: str, closed_form: ClosedForm | None = None,
             formula: str = "", default_vpp: int = 1, aliases: tuple[str, ...] = (),
             variable_vpp: bool = False, closed_form_basis: str = "makespan",
             sizes: Sizes | None = None, work: Work | None = None, flushes: bool = True,
             shares_weights: bool = False, needs_costs: bool = False
             ) -> Callable[[Generator], Generator]:
    """Decorator: ``@register("1f1b", summary=...)`` on ``def generate(pp, microbatches, vpp=1, **opts)``."""

    def deco(fn: Generator) -> Generator:
        if name in LIBRARY:
            raise RuntimeError(f"schedule {name!r} registered twice")
        LIBRARY[name] = ScheduleSpec(name, fn, summary, closed_form, formula, default_vpp, aliases,
                                        variable_vpp, closed_form_basis, sizes=sizes, work=work,
                                        flushes=flushes, shares_weights=shares_weights,
                                        needs_costs=needs_costs)
        for alias in aliases:
            if alias in ALIASES or alias in LIBRARY:
                raise RuntimeError(f"schedule alias {alias!r} registered twice")
            ALIASES[alias] = name
        return fn

    return deco
