package client_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"gcos"
	"gcos/client"
)

// A pipeline step asks about every object its change touches and proceeds only on an allow. Here the server is
// down: the client cannot get a decision, so it blocks, and says why.
func Example() {
	addr := unusedAddress()
	c, err := client.New("http://"+addr, client.WithToken("reader-token"), client.WithRetries(2),
		client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	batch := c.GateBatch(ctx, []gcos.GateCheck{
		{Object: "commerce_orders:order-0000007", Action: gcos.ActionWrite},
		{Object: "catalog_products:prod-0000042", Action: gcos.ActionRead},
	})
	if !batch.AllAllowed() {
		fmt.Println("deploy held:", batch.Decision, batch.Blocked, "of", len(batch.Decisions), "blocked; client error:", batch.Err != nil)
	}

	one := c.Gate(ctx, "commerce_orders:order-0000007", gcos.ActionWrite)
	fmt.Println(one.Object, one.Decision, one.Allowed())
	// Output:
	// deploy held: block 2 of 2 blocked; client error: true
	// commerce_orders:order-0000007 block false
}

// unusedAddress is a loopback address nothing listens on.
func unusedAddress() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
