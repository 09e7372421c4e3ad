"""The console's writes: one function per operation, each in one transaction."""
