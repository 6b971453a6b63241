package main

// repoRoot is the module root, where the binary is built from.
const repoRoot = "."
