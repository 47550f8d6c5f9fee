// The msgpack wire format of the trackmania_rl HTTP API v1 (docs/http-api.md §3), in JavaScript.
//
// A typed array travels as a msgpack map {dtype, shape, data}: `dtype` a numpy type string ("|u1", "|b1", "<i4",
// "<i8", "<f4", "<f8"), `shape` its dimensions, `data` msgpack bin holding the elements in C order, little-endian.
// JavaScript's typed arrays use the machine's byte order, which is little-endian on every platform Node runs on
// in practice; `assertLittleEndian` refuses to go on elsewhere rather than send swapped bytes.
// Decoding is bounded like the server's: no ext types, capped string, array and map lengths.

import { endianness } from "node:os";

import { Decoder, encode } from "@msgpack/msgpack";

const ELEMENTS = {
  "|u1": Uint8Array,
  "|b1": Uint8Array,
  "<i4": Int32Array,
  "<i8": BigInt64Array,
  "<f4": Float32Array,
  "<f8": Float64Array,
};

export function assertLittleEndian() {
  if (endianness() !== "LE") {
    throw new Error("the wire format is little-endian and this machine is not: convert the typed arrays' bytes first");
  }
}

/** A typed array for the wire: `typed` (one of ELEMENTS' classes, matching `dtype`) with its `shape`. */
export function typedArray(dtype, shape, typed) {
  const Elements = ELEMENTS[dtype];
  if (Elements === undefined || !(typed instanceof Elements)) {
    throw new TypeError(`dtype ${dtype} needs a ${Elements ? Elements.name : "known dtype"}, got ${typed?.constructor?.name}`);
  }
  const count = shape.reduce((a, b) => a * b, 1);
  if (typed.length !== count) {
    throw new RangeError(`${typed.length} elements for shape [${shape}] (${count} expected)`);
  }
  return { dtype, shape: [...shape], data: new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength) };
}

/** The elements of a typed array received from the wire, as a fresh, aligned typed array of its dtype. */
export function elements(wireArray, field = "array") {
  const { dtype, shape, data } = wireArray ?? {};
  const Elements = ELEMENTS[dtype];
  if (Elements === undefined || !Array.isArray(shape) || !(data instanceof Uint8Array)) {
    throw new TypeError(`\`${field}\` is not a typed array {dtype, shape, data}`);
  }
  const count = shape.reduce((a, b) => a * b, 1);
  if (data.byteLength !== count * Elements.BYTES_PER_ELEMENT) {
    throw new RangeError(`\`${field}\`: ${data.byteLength} bytes for shape [${shape}] of ${dtype}`);
  }
  return new Elements(new Uint8Array(data).buffer); // a copy: msgpack bin may sit at any offset of the body
}

export function pack(value) {
  return encode(value);
}

/** msgpack -> JavaScript values, every length capped (bin: at most the body's size). */
export function unpack(body) {
  const decoder = new Decoder({
    maxStrLength: 1 << 20,
    maxBinLength: body.byteLength,
    maxArrayLength: 1 << 16,
    maxMapLength: 1 << 12,
    maxExtLength: 0,
  });
  return decoder.decode(body);
}
