"""Built-in schedules, one module each. Each registers its schedule with the registry when it is
imported; importing this package imports them all, in name order (the order ``names()`` lists
them). A new schedule is a module here and its line below (a test checks none is missing)."""

from . import (  # noqa: F401
    dualpipe,
    dualpipe_v,
    gpipe,
    hanayo,
    interleaved_1f1b,
    looped_bfs,
    one_f_one_b,
    two_bw,
    v_half,
    v_min,
    v_zb,
    zb_greedy,
    zb_v,
    zero_bubble,
)
