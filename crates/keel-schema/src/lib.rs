//! keel schema layer (being written).
