"""What the integrations need behind their public modules (:mod:`arenapool.joblib`,
:mod:`arenapool.futures`, :mod:`arenapool.dask`, :mod:`arenapool.ray`): the wrapper
that installs arenapool in a pool's worker processes, ``ARENAPOOL=on``'s startup and
its wait for each library's first import, and the IPython extension, which install
those modules' integrations. Built on :mod:`arenapool._core` and
:func:`arenapool.install`."""
