// Package fairshare shares a worker process's delivery slots between three priority classes,
// high, normal and low, each consumed from its own RabbitMQ queue. High traffic is served first,
// but a sustained high-priority burst must not starve the other classes: each class reserves a
// share of the slots, and the slots a class leaves unused are lent to the classes that have work.
//
// A consumer calls [Scheduler.Acquire] with the class of its queue before it handles a message,
// and calls the returned release function when the handler returns. Slots is the process's
// total worker concurrency; the consumers' prefetch only decides how many messages wait for a
// slot, not how many run.
//
// # Reserved slots
//
// Shares are percentages, one per class, that sum to 100; the default is high 60, normal 30,
// low 10 ([DefaultShares]). Let k be the number of classes with a non-zero share. When
// Slots >= k:
//
//  1. Each class with a non-zero share reserves floor(Slots*share/100) slots, and at least 1.
//  2. Slots left over go one at a time to the classes with the highest shares (a tie goes to
//     the higher priority), so that every slot is reserved by someone.
//  3. If the minimum of 1 pushed the total above Slots, the class with the most reserved slots
//     gives one back until the total is Slots (e.g. 4 slots, 98/1/1: 3/1/1 becomes 2/1/1).
//  4. A class with share 0 reserves nothing: it only ever runs on borrowed slots.
//
// The reserved slots then add up to exactly Slots, and every class with a share has at least one.
// With 16 slots and the default shares that is high 10, normal 5, low 1; with 20 slots 12/6/2;
// with 3 slots 1 each.
//
// When Slots < k (1 or 2 slots with the default shares) a slot cannot be promised to every class
// that has a share, so nothing is reserved: [Scheduler.Reserved] reports 0 for every class and
// the slots are shared by weighted round-robin instead (see "Fewer slots than classes").
//
// # Granting slots
//
// Whenever a slot is free (at Acquire, or when a slot is released), it goes to the first waiter,
// in priority order high, normal, low and first come first served within a class, whose class is
// entitled to it:
//
//   - Owner: the class has fewer slots in flight than it reserves. It gets a slot as soon as one
//     is free.
//   - Borrower: otherwise, the class may take a slot only from the slots no waiting class is
//     entitled to, that is when free > sum over the OTHER classes that have waiters of
//     max(0, reserved - in flight).
//
// Unused reservation is thus lent while none of its owners wait, and once an owner has work the
// next freed slot goes to it, even ahead of a waiting higher-priority class that already holds
// its own reservation. Classes without waiters are owed nothing, so a slot is never left idle
// while someone waits: if no waiting class is owed a slot, any waiter may borrow. When two owners
// are short and one slot is free, the higher priority gets it and the other the next one.
//
// Borrowed slots are not preempted: a class over its reservation keeps its slots until it
// releases them. The guarantee is on the next freed slots, so an owner that starts waiting while
// every slot is taken waits for releases (at most as long as the longest delivery in flight, once
// higher-priority owners are served), never for the borrower's backlog to drain.
//
// When every class is saturated each one therefore runs on its reserved slots, and with
// deliveries of equal length it gets its reserved fraction of the deliveries: 62.5/31.25/6.25 %
// with 16 slots (the shares rounded to whole slots), 60/30/10 % with 20 slots.
//
// # Fewer slots than classes
//
// When Slots < k a free slot goes to the waiting class with the smallest virtual start time
// (start-time fair queueing): each grant moves its class's time on by 1/share, and a class that
// starts waiting is brought forward to the current time, so an idle class banks no credit.
// Saturated classes thus get slots in proportion to their shares (60/30/10 % with the defaults),
// and a class with share s waits for roughly 100/s grants at most between two slots. Ties go to
// the higher priority; a class with share 0 gets a slot only when no class with a share waits.
//
// # Cancellation and release
//
// Acquire returns when its context ends; the waiter leaves its queue, so what its class was owed
// is no longer held back from borrowers. A slot granted at the very moment the context ended is
// handed on to the next waiter, so cancellation never leaks a slot. The release function is
// idempotent, so that a deferred release after an explicit one cannot free a slot twice.
package fairshare
