"""Reports rebuilt from run directories alone: tables, intervals, the paper's Table 3, plots and a page.
Never imports torch, the model or the trainer."""
