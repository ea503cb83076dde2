"""DigiRL: instruction and step critics, doubly robust advantages, the curriculum and the actor update."""
