package lease

// Version is the library version, reported in the user agent.
const Version = "0.1.0"
