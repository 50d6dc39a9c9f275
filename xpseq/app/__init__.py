"""The application around the library: the ``xpseq`` command (``cli``), the demo it runs
(``demo``) and the figures (``plots``)."""
