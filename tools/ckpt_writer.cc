// writer (to be written)
