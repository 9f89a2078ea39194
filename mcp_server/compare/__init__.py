"""compare-kernels engines: categories, recategorize, budget, diff_modules, matching."""
