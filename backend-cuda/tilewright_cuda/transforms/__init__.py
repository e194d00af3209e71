"""Passes over the program, in the order of the backend's phases: thread binding
(``threads``), layout inference (``layout``), pipelining (``pipeline``), distribution of
``T.Parallel`` nests (``distribute``), barrier insertion (``sync``), memory placement
(``memory``) and the dialect's last step (``finish``); ``atomics`` gates scalar atomics."""
