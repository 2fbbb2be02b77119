"""Services: requests in, responses out; they reach models only through the manager and its workers."""
