"""The conformance suite: a catalogue of portable kernels with torch references
(:mod:`.catalogue`), contract checks for any backend (:mod:`.contract`), the pytest plugin
that runs them (:mod:`.plugin`) and the report (:mod:`.report`)."""
