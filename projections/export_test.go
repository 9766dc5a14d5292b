package projections

// LeavesDLQ exposes leavesDLQ to the tests.
var LeavesDLQ = leavesDLQ
