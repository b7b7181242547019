"""What trials and the driver write and the analysis reads: the trial report, the experiment's metadata, Tune's
storage."""
