package redisstore

import "context"

// RenewNow runs one renewal of c's leases without waiting for its tick.
func (c *SocketCap) RenewNow(ctx context.Context) error { return c.renew(ctx) }
