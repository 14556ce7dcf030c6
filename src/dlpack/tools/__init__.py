"""Tools built on the core, not part of it: ``python -m dlpack`` (the interoperability matrix,
``matrix``), ``python -m dlpack check`` (the conformance checker, ``check`` and its Arrow rules
``check_arrow``) and the producers the checker's docs grade (``producers``)."""
