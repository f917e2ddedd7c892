package credentials

// Sign is the proxy's SigV4 signer, for the suite's test.
var Sign = sign
