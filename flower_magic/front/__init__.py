"""What every front end shares: the options and their flags, the launch that owns a run's life, the
outcome it ends with, and the mapping of a run's events to lines a view shows.

The kernel (``magics``), the terminal (``cli``) and the background runner (``runner``) keep only what
is theirs (binding to a notebook, input and interrupt handling, terminal I/O, detaching); the run's
sequence (plan, apply, run, one ending) is ``front.launch.Launch``'s.
"""
