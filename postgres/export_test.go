package postgres

// Translate is the driver-error translation every method applies at its edge.
var Translate = translate
