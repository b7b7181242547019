"""Reports: the headline, the Markdown and HTML pages, plots, one module per search method."""
