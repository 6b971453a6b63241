// Package e2e tests Tally from the outside: the GraphQL API as clients
// see it, on the server's real handler in this process (harness_test.go,
// through transport.NewServerHandler) or on the built binary as a process
// (process_test.go: the command line, signals, kill -9 and restart,
// damaged data directories), against the embedded engine and against
// Redis. Each file holds one concern; the package has no code of its own.
package e2e
