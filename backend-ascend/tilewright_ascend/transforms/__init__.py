"""Passes over the program, in pipeline order: the portable kernel as a dialect kernel
(:mod:`.portable`, with the cube/vector split of :mod:`.split` and :mod:`.rowsplit`), its vector
work as vector ops (:mod:`.vector`), multi-buffering (:mod:`.multibuffer`), memory planning
(:mod:`.memory`), automatic synchronisation (:mod:`.sync`); :mod:`.switches` holds the
TileLang-Ascend switches."""
