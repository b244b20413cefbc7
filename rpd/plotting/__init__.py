"""Figures drawn from saved numbers (never from studies): the house style and one module per family."""
