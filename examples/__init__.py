"""Runnable recipes: workerpool inside a web framework (docs/recipes/), each tested."""
