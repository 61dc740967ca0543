"""The parts of ``python -m arenapool.bench`` (:mod:`arenapool.bench`) for Dask
(``--dask``) and Ray (``--ray``), and the tables and fresh runs they share."""
