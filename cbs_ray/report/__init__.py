"""Reports: the headline, the Markdown and HTML pages, plots, the report folder; each method's own report is in
``cbs_ray.methods``."""
