mod agent;
