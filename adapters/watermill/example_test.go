package watermillonce_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
)

// A router with one middleware line. The message is published twice, as a
// producer's retry would; its handler runs once.
func Example() {
	outcomes := func(_ context.Context, e core.Event) { fmt.Println(e.Outcome) }
	guard, err := core.New(memstore.New(), &core.Config{Observer: outcomes}) // redisstore in production
	if err != nil {
		log.Fatal(err)
	}
	// Publish returns once the message is acknowledged, to keep the output in order.
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	router.AddMiddleware(watermillonce.MustMiddleware(guard, nil))
	router.AddConsumerHandler("welcome", "signups", pubSub, func(msg *message.Message) error {
		fmt.Printf("welcome, %s\n", msg.Payload)
		return nil
	})
	stop := runExampleRouter(router)
	defer stop()

	msg := message.NewMessage(watermill.NewUUID(), message.Payload("user-42"))
	for range 2 {
		if err := pubSub.Publish("signups", msg); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// welcome, user-42
	// ran
	// duplicate
}

// A key from the message's metadata, and the poison queue for messages that
// can never run: here a second charge of one order with another amount.
func ExampleIsPoison() {
	guard, err := core.New(memstore.New(), nil)
	if err != nil {
		log.Fatal(err)
	}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	poisoned, err := pubSub.Subscribe(context.Background(), "poison")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for msg := range poisoned {
			fmt.Printf("poisoned %s: %s\n", msg.Payload, msg.Metadata.Get(middleware.ReasonForPoisonedKey))
			msg.Ack()
		}
	}()

	poisonQueue, err := middleware.PoisonQueueWithFilter(pubSub, "poison", watermillonce.IsPoison)
	if err != nil {
		log.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	router.AddMiddleware(
		poisonQueue,
		watermillonce.MustMiddleware(guard, &watermillonce.Config{
			Key: func(msg *message.Message) string { return msg.Metadata.Get("order_id") },
		}),
	)
	router.AddConsumerHandler("charge", "charges", pubSub, func(msg *message.Message) error {
		fmt.Printf("charged %s\n", msg.Payload)
		return nil
	})
	stop := runExampleRouter(router)
	defer stop()

	for i, amount := range []string{"10 EUR", "10 EUR", "99 EUR"} {
		msg := message.NewMessage(fmt.Sprintf("m-%d", i+1), message.Payload(amount))
		msg.Metadata.Set("order_id", "o-7")
		if err := pubSub.Publish("charges", msg); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// charged 10 EUR
	// poisoned 99 EUR: jobonce: watermillonce: message m-3 (handler "charge") is not retried: jobonce: key reused with a different payload: key "6:charge:o-7" is done with fingerprint "LCPkUzsK_Iiuv5ydbiDvtg", this delivery has "ytOa-nW9GiLUe-ejxM0qxA"
}

// A publisher that publishes each message once per UUID and topic: a
// retried Publish of the same message publishes nothing.
func ExampleNewPublisher() {
	guard, err := core.New(memstore.New(), nil)
	if err != nil {
		log.Fatal(err)
	}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	received, err := pubSub.Subscribe(context.Background(), "orders")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for msg := range received {
			fmt.Printf("received %s\n", msg.Payload)
			msg.Ack()
		}
	}()

	pub, err := watermillonce.NewPublisher(guard, pubSub, nil)
	if err != nil {
		log.Fatal(err)
	}
	first := message.NewMessage(watermill.NewUUID(), message.Payload("ship order 1"))
	for _, msg := range []*message.Message{
		first,
		first, // a retry: the same UUID
		message.NewMessage(watermill.NewUUID(), message.Payload("ship order 2")),
	} {
		if err := pub.Publish("orders", msg); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// received ship order 1
	// received ship order 2
}

// runExampleRouter runs router until stop, which closes it.
func runExampleRouter(router *message.Router) (stop func()) {
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	<-router.Running()
	return func() {
		if err := router.Close(); err != nil {
			log.Fatal(err)
		}
		if err := <-done; err != nil {
			log.Fatal(err)
		}
	}
}
