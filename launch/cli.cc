// CLI (to be written)
