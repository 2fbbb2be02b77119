"""HTTP routes, one module per endpoint family; each is a thin call into a service."""
