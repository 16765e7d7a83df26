//! keel storage kernel (being written).
