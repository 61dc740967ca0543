"""arenapool's core, which knows no library it integrates with: the check of the
interpreter's build, the warnings said once and the optional steps, the ``ARENAPOOL``
switch, what the other holders (glibc, pymalloc, Arrow's pools, DuckDB) give back and the
watcher that asks them, Arrow's default pool, and the breakdown of the memory by
holder. The package's own functions and the integrations build on it; of what is
above it, it uses only :class:`arenapool.phase`, imported where an optional step
opens one."""
