#!/usr/bin/env node
// Creates the bucket named by CSA2_STORE_URL (s3://bucket/prefix?endpoint=…&forcePathStyle=1) if it
// does not exist yet: the compose stack's `s3-init` service runs it once before the gateway and the
// workers start. Credentials and region come from the AWS_* variables, as for the services.
// Exit 0 when the bucket exists (created now or before), 1 otherwise.
import { CreateBucketCommand, HeadBucketCommand, S3Client } from '@aws-sdk/client-s3';

const storeUrl = process.env.CSA2_STORE_URL ?? '';
if (!storeUrl.startsWith('s3://')) {
  console.log(`create-bucket: CSA2_STORE_URL is not an s3:// URL (${storeUrl || 'unset'}); nothing to do`);
  process.exit(0);
}
const url = new URL(storeUrl);
const bucket = url.hostname;
const endpoint = url.searchParams.get('endpoint') ?? undefined;
const forcePathStyle = ['1', 'true'].includes(url.searchParams.get('forcePathStyle') ?? '');
const region = url.searchParams.get('region') ?? process.env.AWS_REGION ?? 'us-east-1';
const client = new S3Client({ region, forcePathStyle, ...(endpoint !== undefined ? { endpoint } : {}) });

const attempts = Number(process.env.CREATE_BUCKET_ATTEMPTS ?? 30);
for (let attempt = 1; ; attempt++) {
  try {
    try {
      await client.send(new HeadBucketCommand({ Bucket: bucket }));
      console.log(`create-bucket: bucket ${bucket} exists`);
    } catch (err) {
      if (err?.$metadata?.httpStatusCode !== 404 && err?.name !== 'NotFound') throw err;
      await client.send(new CreateBucketCommand({ Bucket: bucket }));
      console.log(`create-bucket: created bucket ${bucket}`);
    }
    process.exit(0);
  } catch (err) {
    if (attempt >= attempts) {
      console.error(`create-bucket: bucket ${bucket} at ${endpoint ?? 'AWS'}: ${err?.name ?? 'Error'}: ${err?.message ?? err}`);
      process.exit(1);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}
