// coordinator: rank 0 role (to be written)
