"""Every write others must see goes through one function here, named after its operation."""
