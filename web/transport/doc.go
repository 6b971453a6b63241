// Package transport serves Tally's GraphQL API over the web: GraphQL over
// HTTP (http.go, by the GraphQL-over-HTTP spec) and over WebSocket
// (ws.go, graphql-transport-ws; its sockets on an event loop,
// ws_upgrade.go and ws_socket.go, their deadlines in a timing wheel,
// ws_wheel.go), the limits every request meets before
// and while it runs (cost.go prices an operation, ratelimit.go spends
// mutation and cost budgets per client, ws_cap.go counts sockets),
// persisted queries (apq.go), what the server observes (http_observe.go,
// graphql_metrics.go, engine_metrics.go, and traces in tracing.go), and
// the assembly of it all
// (handler.go for /query, server.go for the server's other endpoints and
// its http.Server).
//
// It owns no product rule: operations run through gqlgen's executor over
// the resolvers (package resolvers), or through a compiled plan (package
// fastpath) whose operation context plan_context.go makes without
// gqlgen's per-request work. What it promises: every request, served or
// refused, is answered as the GraphQL-over-HTTP spec and
// graphql-transport-ws ask, every error carries one of API.md's codes
// (resolvers.PresentError) and no Go error text, and what one operation
// may cost is known and bounded before it runs.
package transport
