// mixgrad/error.hpp — the one exception hierarchy of mixgrad.
//
// Every user error (bad shape, wrong dtype, misuse of a GradManager, a missing
// file) is reported by throwing one of these. A throwing call leaves tensors,
// tapes, scalers and optimizers as they were.
//
//   try { mg::F::matmul(a, b); }
//   catch (const mg::ShapeError& e) { std::cerr << e.what(); }
#pragma once

#include <stdexcept>
#include <string>

namespace mixgrad {

/// Base of every exception mixgrad throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Shapes that do not fit the op (matmul inner dims, broadcast, reshape size).
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// A dtype the op does not accept, or two dtypes that do not go together.
class DTypeError : public Error {
 public:
  using Error::Error;
};

/// Tensors on different devices, or a device that is not available.
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// An object used in the wrong state (backward without record(), ...).
class StateError : public Error {
 public:
  using Error::Error;
};

/// An argument whose value is out of its domain (a scale factor that is not
/// positive and finite, a learning rate below zero, a malformed state dict).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// Memory for a tensor could not be allocated (the size was valid but the
/// host or device had not enough free). Nothing was changed.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

/// A file that is missing, unreadable or malformed.
class IOError : public Error {
 public:
  using Error::Error;
};

}  // namespace mixgrad
