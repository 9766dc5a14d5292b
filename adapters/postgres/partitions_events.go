package postgres

// The event log, the payloads kept apart and the stored accept answers are partitioned by time
// (migration 0019): a delivery's events, its notification's payload and the answer to its accept
// sit in the partitions of its accept time, and leave together.
func init() {
	partitionedTables = append(partitionedTables,
		PartitionedTable{Name: "events", Key: KeyDeliveryID},
		PartitionedTable{Name: "notification_payloads", Key: KeyTime},
		PartitionedTable{Name: "accept_requests", Key: KeyTime},
	)
}
