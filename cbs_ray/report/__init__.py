"""What every method's report shares: the reading and report steps a method fills (``reading``), the registry's
lookup of them and the report command (``methods``, ``command``), the report folder, the pieces of a page and of a
figure (``page``, ``plots``), and the predict command; each method's own report is in ``cbs_ray.methods``."""
