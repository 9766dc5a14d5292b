DROP TABLE provider_health;
