"""Tools that check the generated Ascend C against the vendor's API: the source set every check
compiles (:mod:`.sources`), the front-end check against the asc-devkit headers
(:mod:`.headers`) and the kit for a machine with CANN (:mod:`.cann`)."""
