/**
 * @module onnx/proto
 * A minimal protobuf writer for the parts of the ONNX schema (onnx.proto3) that csa2-core emits:
 * ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto and ValueInfoProto. Only writing is
 * needed: graphs are built in TypeScript and handed to onnxruntime as bytes.
 *
 * Field numbers (onnx.proto):
 *   ModelProto      ir_version=1 opset_import=8 producer_name=2 graph=7
 *   OperatorSetId   domain=1 version=2
 *   GraphProto      node=1 name=2 initializer=5 input=11 output=12
 *   NodeProto       input=1 output=2 name=3 op_type=4 attribute=5 domain=7
 *   AttributeProto  name=1 f=2 i=3 s=4 t=5 floats=7 ints=8 type=20
 *   TensorProto     dims=1 data_type=2 name=8 raw_data=9
 *   ValueInfoProto  name=1 type=2;  TypeProto tensor_type=1;  Tensor elem_type=1 shape=2
 *   TensorShape     dim=1;  Dimension dim_value=1 dim_param=2
 */

const textEncoder = new TextEncoder();

/** Appends protobuf fields to a growable byte buffer. */
export class ProtoWriter {
  private buf = new Uint8Array(256);
  private len = 0;

  private reserve(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.len + n) cap *= 2;
    const next = new Uint8Array(cap);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
  }

  private varint(value: number | bigint): void {
    let v = BigInt.asUintN(64, BigInt(value));
    this.reserve(10);
    while (v >= 0x80n) {
      this.buf[this.len++] = Number(v & 0x7fn) | 0x80;
      v >>= 7n;
    }
    this.buf[this.len++] = Number(v);
  }

  private tag(field: number, wireType: number): void {
    this.varint((field << 3) | wireType);
  }

  int(field: number, value: number | bigint): this {
    this.tag(field, 0);
    this.varint(value);
    return this;
  }

  float(field: number, value: number): this {
    this.tag(field, 5);
    this.reserve(4);
    new DataView(this.buf.buffer, this.buf.byteOffset + this.len, 4).setFloat32(0, value, true);
    this.len += 4;
    return this;
  }

  bytes(field: number, data: Uint8Array): this {
    this.tag(field, 2);
    this.varint(data.length);
    this.reserve(data.length);
    this.buf.set(data, this.len);
    this.len += data.length;
    return this;
  }

  string(field: number, s: string): this {
    return this.bytes(field, textEncoder.encode(s));
  }

  message(field: number, m: ProtoWriter): this {
    return this.bytes(field, m.finish());
  }

  finish(): Uint8Array {
    return this.buf.subarray(0, this.len);
  }
}
